//! What `delayq bench` and `delayq demo` share: the boxed error they return, the lateness
//! histogram, poison-tolerant locking, the configuration of a run (any topology), run-unique
//! key prefixes and their clean-up (master by master).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use delayq_engine::config::{Backend, Config};
use delayq_postgres::{Database, PostgresConfig};
use delayq_storage::{Partition, TaskStore};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use rand::Rng;

/// The error `demo` and `bench` return: its text is the one line the command prints.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest lateness a histogram tracks (larger values count as this): one day, in ms.
pub(crate) const HISTOGRAM_MAX_MS: u64 = 86_400_000;

/// A histogram of milliseconds (0 to a day) with 3 significant figures. Fixed bounds, because
/// `saturating_record` on an auto-resizing histogram clamps to its *current* (tiny) range.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_MS, 3).expect("constant bounds are valid")
}

/// Locks a mutex, ignoring poisoning (a panicking holder leaves the counts usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `<base>-<8 hex digits>`: a key prefix no other run uses.
pub(crate) fn unique_prefix(base: &str) -> String {
    format!("{base}-{:08x}", rand::rng().random::<u32>())
}

/// The configuration of a bench or demo run: the file's (`path`, else ./cluster.yaml when it
/// exists, else the defaults) with the environment's overrides (`DELAYQ_REDIS_URL`,
/// `DELAYQ_REDIS_CLUSTER`, `DELAYQ_REDIS_SENTINEL`, ...), and `--redis URL` (`redis`) in place
/// of whatever topology they name.
pub(crate) fn run_config(path: Option<&Path>, redis: Option<&str>) -> Result<Config, BoxError> {
    let mut config = Config::load_or_default(path)?;
    if let Some(url) = redis {
        config.redis.url = url.to_owned();
        config.redis.cluster.clear();
        config.redis.sentinel = None;
    }
    Ok(config)
}

/// The server `delayq demo` runs on: `--redis URL` or `--postgres URL` (the flags), else the
/// backend of an explicit `--config FILE` or of the environment (`DELAYQ_REDIS_URL`,
/// `DELAYQ_REDIS_CLUSTER`, `DELAYQ_REDIS_SENTINEL`, `DELAYQ_BACKEND`,
/// `DELAYQ_POSTGRES_URL`); `None` (no server named): the in-memory backend.
pub(crate) fn demo_backend(
    redis: Option<&str>,
    postgres: Option<&str>,
    path: Option<&Path>,
) -> Result<Option<Config>, BoxError> {
    let from_env = [
        "DELAYQ_REDIS_URL",
        "DELAYQ_REDIS_CLUSTER",
        "DELAYQ_REDIS_SENTINEL",
        "DELAYQ_BACKEND",
        "DELAYQ_POSTGRES_URL",
    ]
    .iter()
    .any(|variable| std::env::var_os(variable).is_some_and(|value| !value.is_empty()));
    if redis.is_none() && postgres.is_none() && path.is_none() && !from_env {
        return Ok(None);
    }
    let mut config = run_config(path, redis)?;
    if redis.is_some() {
        config.backend = Backend::Redis;
    }
    if let Some(url) = postgres {
        config.backend = Backend::Postgres;
        config.postgres.url = url.to_owned();
    }
    Ok(Some(config))
}

/// Drops a finished run's PostgreSQL schema (every node is shut down) with all it holds.
pub(crate) async fn drop_schema(settings: &PostgresConfig) -> Result<(), BoxError> {
    let database = Database::new(settings)?;
    let statement = format!(
        "DROP SCHEMA IF EXISTS {} CASCADE",
        database.schema().quoted()
    );
    database
        .run("drop the run's schema", |client| {
            let statement = statement.clone();
            Box::pin(async move { client.batch_execute(&statement).await })
        })
        .await?;
    tracing::debug!(schema = database.schema().name(), "run schema dropped");
    Ok(())
}

/// Removes a finished run's keys (every node is shut down): every key under the run's unique
/// prefix, deleted master by master (`SCAN` on each master: on a cluster one connection's
/// `SCAN` sees one master only). When that is not possible (`masters` unknown, or `SCAN`
/// refused to an ACL user without it), the store's own clean-up of `queues` instead
/// ([`remove_run_data`]), which leaves a few small keys.
pub(crate) async fn remove_run_keys(
    masters: Option<&crate::cli::bench::masters::Masters>,
    config: &Config,
    store: Arc<dyn TaskStore>,
    queues: &[&str],
) -> Result<(), BoxError> {
    let prefix = &config.redis.key_prefix;
    if let Some(masters) = masters {
        match masters.delete_prefix(prefix).await {
            Ok(deleted) => {
                tracing::debug!(deleted, prefix, "run keys deleted");
                return Ok(());
            }
            Err(error) => tracing::warn!(
                %error,
                prefix,
                "deleting the run's keys master by master failed; removing its tasks instead"
            ),
        }
    }
    remove_run_data(store, queues).await
}

/// A time after every due time and lease of a run (2^52 ms, exact as a Lua number).
pub(crate) const END_OF_TIME_MS: u64 = 1 << 52;

/// Removes the tasks of `queues` from the store after a run (every node is shut down): pending
/// and in-flight tasks are cancelled, dead letters purged, completion records pruned. What
/// the store API cannot remove stays: the queue registry entry and the cluster's epoch key
/// (a few small keys under the run's unique prefix).
pub(crate) async fn remove_run_data(
    store: Arc<dyn TaskStore>,
    queues: &[&str],
) -> Result<(), BoxError> {
    let known: BTreeMap<String, u32> = store
        .queues()
        .await?
        .into_iter()
        .map(|(queue, partitions)| (queue.as_str().to_owned(), partitions))
        .collect();
    for (queue, partitions) in known
        .into_iter()
        .filter(|(queue, _)| queues.contains(&queue.as_str()))
    {
        let name = delayq_storage::QueueName::new(&queue)?;
        for index in 0..partitions {
            let partition = Partition::new(name.clone(), index);
            // No node runs any more: every lease can be ended, so in-flight tasks become
            // pending and the cancels below take them too.
            while !store
                .requeue_expired(&partition, END_OF_TIME_MS, 10_000)
                .await?
                .is_empty()
            {}
            loop {
                let ids = store
                    .peek_window(&partition, 0, END_OF_TIME_MS, 10_000)
                    .await?;
                if ids.is_empty() {
                    break;
                }
                let cancels: Vec<_> = stream::iter(ids)
                    .map(|(id, _)| {
                        let store = store.clone();
                        let partition = partition.clone();
                        async move { store.cancel(&partition, &id).await }
                    })
                    .buffer_unordered(256)
                    .collect()
                    .await;
                for cancel in cancels {
                    cancel?;
                }
            }
            store.purge_dead(&partition, None).await?;
            while store.prune_done(&partition, END_OF_TIME_MS, 10_000).await? > 0 {}
        }
    }
    Ok(())
}
