//! The [`Database`]: a pool of connections to one database (one of several hosts, with
//! `target_session_attrs=read-write` picking the primary), and [`Database::run`] /
//! [`Database::transaction`], which retry transient failures per a [`RetryPolicy`].

use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures::future::BoxFuture;
use rand::Rng;
use tokio_postgres::IsolationLevel;
use tokio_postgres_rustls::MakeRustlsConnect;
use tracing::Instrument;

use crate::config::{PostgresConfig, Resolved, Schema};
use crate::error::{Error, Result};

/// The connection type of a dedicated (unpooled) connection: drive it (spawn it, or poll
/// its messages) for its client to work.
pub type DedicatedConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// How long and how often a transient failure is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// No new attempt starts after this much time since the first one (zero: one attempt).
    pub max_elapsed: Duration,
    /// The pause after the first failure; doubled after each further one.
    pub initial_backoff: Duration,
    /// The longest pause.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 10 s: long enough for a restart or a failover, short enough that a caller that has
    /// its own retries (the engine) is told.
    fn default() -> Self {
        RetryPolicy {
            max_elapsed: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub fn none() -> Self {
        RetryPolicy {
            max_elapsed: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }

    /// The pause before attempt `attempt + 1` (1-based `attempt`), with up to 25 % jitter so
    /// that nodes that failed together do not come back together.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let doubled = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let base = doubled.min(self.max_backoff);
        let jitter = rand::rng().random_range(0.0..0.25);
        base.mul_f64(1.0 - jitter)
    }
}

/// A pool of connections to the database, the schema delayq uses in it, and the retry
/// policy of [`Database::run`].
///
/// Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    resolved: std::sync::Arc<Resolved>,
    connector: MakeRustlsConnect,
    schema: Schema,
    retry: RetryPolicy,
    statement_timeout: Duration,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("target", &self.resolved.target)
            .field("schema", &self.schema.name())
            .field("retry", &self.retry)
            .finish()
    }
}

impl Database {
    /// The pool for `config`; no connection is made until one is needed (see
    /// [`Database::ping`]). Reads the TLS files now.
    pub fn new(config: &PostgresConfig) -> Result<Database> {
        let resolved = config.resolve()?;
        let schema = Schema::new(&config.schema)?;
        let connector = resolved.tls.connector()?;
        let manager = Manager::from_config(
            resolved.pg.clone(),
            connector.clone(),
            ManagerConfig {
                // A connection the server closed is noticed by its task and dropped here.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(config.connect_timeout))
            .recycle_timeout(Some(config.connect_timeout))
            .build()
            .map_err(|error| {
                Error::invalid(
                    "postgres.pool_size",
                    &config.pool_size.to_string(),
                    &error.to_string(),
                )
            })?;
        Ok(Database {
            pool,
            resolved: std::sync::Arc::new(resolved),
            connector,
            schema,
            retry: RetryPolicy::default(),
            statement_timeout: config.statement_timeout,
        })
    }

    /// The same pool with another retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The retry policy of [`Database::run`] and [`Database::transaction`].
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// delayq's schema in this database.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The URL without its password.
    pub fn target(&self) -> &str {
        &self.resolved.target
    }

    /// `postgres.statement_timeout` (zero: none).
    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// The pool's size and how many connections are open and idle now.
    pub fn pool_status(&self) -> deadpool_postgres::Status {
        self.pool.status()
    }

    /// The typed error of a driver error of `operation` (password scrubbed).
    pub fn error(&self, operation: &'static str, error: &tokio_postgres::Error) -> Error {
        Error::from_driver(operation, error, &self.resolved.secrets)
    }

    /// Runs `SELECT 1` on a pooled connection (with retries).
    pub async fn ping(&self) -> Result<()> {
        self.run("ping", |client| {
            Box::pin(async move { client.simple_query("SELECT 1").await.map(|_| ()) })
        })
        .await
    }

    /// One pooled connection, without retry: for work that must keep one connection (it
    /// goes back to the pool when dropped).
    pub async fn client(&self, operation: &'static str) -> Result<Object> {
        self.pool
            .get()
            .await
            .map_err(|error| Error::from_pool(operation, &error, &self.resolved.secrets))
    }

    /// A new connection outside the pool (a listener's, a migrator's holding a session
    /// lock), with the pool's settings. Nothing happens on it until its
    /// [`DedicatedConnection`] is driven.
    pub async fn connect_dedicated(
        &self,
        operation: &'static str,
    ) -> Result<(tokio_postgres::Client, DedicatedConnection)> {
        self.connect_as(operation, None).await
    }

    /// [`Database::connect_dedicated`] with `application_name` suffixed by `-<role>` (so
    /// that `pg_stat_activity` tells the listener from the pool).
    pub(crate) async fn connect_as(
        &self,
        operation: &'static str,
        role: Option<&str>,
    ) -> Result<(tokio_postgres::Client, DedicatedConnection)> {
        let mut config = self.resolved.pg.clone();
        if let Some(role) = role {
            let name = format!(
                "{}-{role}",
                config.get_application_name().unwrap_or("delayq")
            );
            config.application_name(&name);
        }
        config
            .connect(self.connector.clone())
            .await
            .map_err(|error| self.error(operation, &error))
    }

    /// Runs `work` on a pooled connection; a transient failure (of getting the connection or
    /// of `work`) is tried again, on another connection, until the [`RetryPolicy`] gives up.
    ///
    /// `work` may run more than once, and a statement whose connection dropped may have been
    /// applied: make it idempotent (an upsert, a fenced update) or use
    /// [`Database::transaction`] for several statements that must apply together.
    ///
    /// ```no_run
    /// # async fn example(db: &delayq_postgres::Database) -> delayq_postgres::Result<()> {
    /// let now: i64 = db
    ///     .run("clock", |client| {
    ///         Box::pin(async move {
    ///             let row = client
    ///                 .query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8", &[])
    ///                 .await?;
    ///             Ok(row.get(0))
    ///         })
    ///     })
    ///     .await?;
    /// # let _ = now;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<T, F>(&self, operation: &'static str, mut work: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(
                &'c Object,
            )
                -> BoxFuture<'c, std::result::Result<T, tokio_postgres::Error>>
            + Send,
    {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            match self.attempt(operation, attempt, &mut work).await {
                Err(error)
                    if self
                        .pause_before_retry(operation, started, attempt, &error)
                        .await =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Runs `work` once on a pooled connection: for one statement that must not be sent
    /// twice (it is not idempotent and commits on its own, like a claim). A failure is
    /// returned as it is; a transient one (a lost connection, a `statement_timeout`) means
    /// the statement's outcome is unknown, and the caller finds out.
    pub async fn run_once<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnOnce(
                &'c Object,
            )
                -> BoxFuture<'c, std::result::Result<T, tokio_postgres::Error>>
            + Send,
    {
        self.attempt(operation, 1, work).await
    }

    /// One attempt of `work` on a pooled connection (numbered `attempt` in its span).
    async fn attempt<T, F>(&self, operation: &'static str, attempt: u32, work: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnOnce(
                &'c Object,
            )
                -> BoxFuture<'c, std::result::Result<T, tokio_postgres::Error>>
            + Send,
    {
        let span = tracing::debug_span!("postgres", operation, attempt);
        async {
            let client = self.client(operation).await?;
            let result = work(&client).await;
            self.finish(operation, client, result, attempt)
        }
        .instrument(span)
        .await
    }

    /// Runs `work` in a transaction (read committed) on a pooled connection and commits it;
    /// on a transient failure (a serialization failure, a deadlock, a lost connection) the
    /// transaction is rolled back and `work` runs again in a new one. A connection lost
    /// during the COMMIT itself is not tried again, as the transaction may have been applied:
    /// the error is transient and says that its outcome is unknown.
    pub async fn transaction<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send,
        F: for<'t> FnMut(
                &'t deadpool_postgres::Transaction<'_>,
            )
                -> BoxFuture<'t, std::result::Result<T, tokio_postgres::Error>>
            + Send,
    {
        self.transaction_with(operation, IsolationLevel::ReadCommitted, work)
            .await
    }

    /// [`Database::transaction`] at `isolation`.
    pub async fn transaction_with<T, F>(
        &self,
        operation: &'static str,
        isolation: IsolationLevel,
        mut work: F,
    ) -> Result<T>
    where
        T: Send,
        F: for<'t> FnMut(
                &'t deadpool_postgres::Transaction<'_>,
            )
                -> BoxFuture<'t, std::result::Result<T, tokio_postgres::Error>>
            + Send,
    {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let span = tracing::debug_span!("postgres", operation, attempt);
            // Set when the connection was lost during COMMIT: the transaction may have been
            // applied, so it is not run again.
            let mut outcome_unknown = false;
            let result = async {
                let mut client = self.client(operation).await?;
                let result = async {
                    let transaction = client
                        .build_transaction()
                        .isolation_level(isolation)
                        .start()
                        .await?;
                    let value = work(&transaction).await?;
                    if let Err(error) = transaction.commit().await {
                        // A server's answer (a serialization failure at commit) means rolled
                        // back; no answer means unknown.
                        outcome_unknown = error.code().is_none();
                        return Err(error);
                    }
                    Ok(value)
                }
                .await;
                self.finish(operation, client, result, attempt)
            }
            .instrument(span)
            .await;
            match result {
                Err(error)
                    if !outcome_unknown
                        && self
                            .pause_before_retry(operation, started, attempt, &error)
                            .await =>
                {
                    attempt += 1;
                }
                Err(error) if outcome_unknown => return Err(error.with_unknown_outcome()),
                result => return result,
            }
        }
    }

    /// Maps `result`; a connection that must not serve again (closed, or on a read-only
    /// server after a failover) is taken out of the pool.
    fn finish<T>(
        &self,
        operation: &'static str,
        client: Object,
        result: std::result::Result<T, tokio_postgres::Error>,
        attempt: u32,
    ) -> Result<T> {
        match result {
            Ok(value) => Ok(value),
            Err(error) => {
                let typed = self.error(operation, &error);
                let read_only = error.code()
                    == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION);
                if read_only || client.is_closed() {
                    drop(Object::take(client));
                }
                tracing::debug!(operation, attempt, error = %typed, "PostgreSQL call failed");
                Err(typed)
            }
        }
    }

    /// Whether a failed `attempt` (1-based) of `operation` is tried again: it is transient
    /// and the policy leaves time for another; then it sleeps the backoff first.
    pub(crate) async fn pause_before_retry(
        &self,
        operation: &'static str,
        started: Instant,
        attempt: u32,
        error: &Error,
    ) -> bool {
        if !error.is_transient() {
            return false;
        }
        let pause = self.retry.backoff(attempt);
        if started.elapsed() + pause >= self.retry.max_elapsed {
            return false;
        }
        tracing::warn!(
            operation,
            attempt,
            retry_in_ms = pause.as_millis() as u64,
            error = %error,
            "transient PostgreSQL failure, trying again"
        );
        tokio::time::sleep(pause).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_below() {
        let policy = RetryPolicy {
            max_elapsed: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        for (attempt, full) in [(1, 100), (2, 200), (3, 400), (4, 500), (30, 500)] {
            let pause = policy.backoff(attempt);
            let full = Duration::from_millis(full);
            assert!(
                pause <= full && pause >= full.mul_f64(0.75),
                "{attempt}: {pause:?}"
            );
        }
    }

    #[test]
    fn a_pool_is_made_without_connecting() {
        let database = Database::new(&PostgresConfig::new("postgres://u:p@127.0.0.1:1/db"))
            .expect("valid settings");
        assert_eq!(database.pool_status().size, 0);
        assert!(!format!("{database:?}").contains(":p@"));
    }
}
