//! delayq's one PostgreSQL layer, as delayq-redis is for Redis: used by delayq-storage and
//! delayq-coordinator when `backend: postgres`.
//!
//! Built on [tokio-postgres](https://docs.rs/tokio-postgres) with the
//! [deadpool-postgres](https://docs.rs/deadpool-postgres) pool, and TLS through
//! [tokio-postgres-rustls](https://docs.rs/tokio-postgres-rustls) on the workspace's rustls
//! (ring). Why these: tokio-postgres is the asynchronous driver the others build on, speaks the
//! protocol's pipelining (statements of one client are sent without waiting for each other's
//! answers), gives notifications as they arrive on a connection we drive ourselves (what a
//! listener that reconnects needs), connects to the first of several hosts that accepts writes
//! (`target_session_attrs=read-write`), and hands its `Transaction` to applications that
//! schedule inside their own transaction; deadpool-postgres adds a small pool with a
//! per-connection statement cache and nothing else. sqlx would bring its own pool, macros
//! checked against a live database at build time, and a second TLS stack.
//!
//! ```no_run
//! use delayq_postgres::{Database, Listener, ListenerOptions, Migrator, PostgresConfig};
//!
//! # async fn example() -> Result<(), delayq_postgres::Error> {
//! let config = PostgresConfig::new(
//!     "postgres://delayq:secret@db1:5432,db2:5432/app?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=/etc/delayq/ca.pem",
//! );
//! let db = Database::new(&config)?;
//! let report = Migrator::new(&db).apply().await?; // under an advisory lock, once per schema
//! println!("{}", report.status);
//!
//! let mut wake = Listener::start(&db, ListenerOptions::new(["delayq_wake"])).await?;
//! let schema = db.schema().quoted().to_owned();
//! db.run("touch", move |client| {
//!     let sql = format!("UPDATE {schema}.meta SET updated_at = clock_timestamp()");
//!     Box::pin(async move {
//!         client.batch_execute(&sql).await?;
//!         client.execute("SELECT pg_notify('delayq_wake', 'meta')", &[]).await.map(|_| ())
//!     })
//! })
//! .await?; // a transient failure (restart, failover, statement_timeout) is tried again
//! let event = wake.next().await;
//! # let _ = event;
//! # Ok(())
//! # }
//! ```
//!
//! # What it guarantees
//! - Error classes ([`ErrorClass`]): a lost or refused connection, a server shutting down or
//!   starting (`57P01`, `57P02`, `57P03`), `statement_timeout` (`57014`), a serialization
//!   failure (`40001`), a deadlock (`40P01`) and a read-only standby after a failover (`25006`)
//!   are transient; [`Database::run`] and [`Database::transaction`] try them again per the
//!   [`RetryPolicy`], on another connection (one on a read-only server is dropped from the
//!   pool). Everything else is permanent and returned at once.
//! - TLS by libpq's `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`)
//!   with `sslrootcert` (a file, or `system`), `sslcert` and `sslkey` ([`SslMode`]).
//! - Migrations ([`Migrator`]): versioned, each in a transaction with its record in
//!   `{schema}.schema_migrations`, under a per-schema advisory lock; a re-run does nothing; a
//!   version applied by a newer release is left alone and reported.
//! - The [`Listener`] LISTENs on its own connection, reconnects with backoff, LISTENs again,
//!   and says [`ListenerEvent::Resumed`] so its reader re-reads what it may have missed.
//! - [`Compactor`] gives back the disk a large backlog left in oversized indexes and in the
//!   small `partitions` table, online (`REINDEX INDEX CONCURRENTLY`; a `VACUUM FULL` of a
//!   small table that gives up when its lock is not free at once), under an advisory lock.
//! - No message of this crate contains a password ([`redact_url`]).

pub mod compact;
mod config;
mod error;
mod listener;
mod migrate;
mod migrations;
mod pool;
mod tls;

pub use compact::{
    plan as compaction_plan, Action as CompactAction, CompactReport, Compactor,
    Relation as CompactRelation,
};
pub use config::{quote_ident, redact_url, PostgresConfig, Schema, DEFAULT_SCHEMA, DEFAULT_URL};
pub use error::{classify, classify_sqlstate, Error, ErrorClass, Result};
pub use listener::{Listener, ListenerEvent, ListenerOptions, Notification, ResumeReason};
pub use migrate::{AppliedMigration, MigrationReport, MigrationStatus, Migrator};
pub use migrations::{Migration, MIGRATIONS};
pub use pool::{Database, DedicatedConnection, RetryPolicy};
pub use tls::{SslMode, TlsSettings};

/// The driver this layer is built on, for statements, rows and transactions.
pub use tokio_postgres;

/// The pool, whose pooled client ([`deadpool_postgres::Object`]) and transaction
/// ([`deadpool_postgres::Transaction`]) [`Database::run`] and [`Database::transaction`] hand out.
pub use deadpool_postgres;
