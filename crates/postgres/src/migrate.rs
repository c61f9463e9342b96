//! Versioned migrations of delayq's schema: `{schema}.schema_migrations` records each applied
//! version; [`Migrator::apply`] runs the missing ones in order, each in its own transaction
//! with its record, on one connection holding a session advisory lock, so that nodes starting
//! together migrate once and the others wait and find nothing left to do.
//!
//! A version in the table that this release does not know was applied by a newer release:
//! [`Migrator::apply`] leaves it (a node of the previous release works beside the new one during
//! a rolling upgrade) and [`Migrator::status`] reports it.

use std::fmt;

use tokio_postgres::Client;
use tracing::Instrument;

use crate::config::Schema;
use crate::error::{Error, ErrorClass, Result};
use crate::migrations::{fnv1a, Migration, MIGRATIONS};
use crate::pool::Database;

/// How long a migrator waits for another one's lock before it gives up (transient).
const LOCK_WAIT: &str = "60s";

/// One applied migration as the table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    /// Its version.
    pub version: u32,
    /// Its name when it was applied.
    pub name: String,
    /// Its checksum when it was applied.
    pub checksum: String,
}

/// Where a schema stands against this release's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// The schema.
    pub schema: String,
    /// Whether `{schema}.schema_migrations` exists.
    pub initialized: bool,
    /// The versions applied, in order.
    pub applied: Vec<AppliedMigration>,
    /// This release's versions not yet applied, in order.
    pub pending: Vec<u32>,
    /// Applied versions this release does not know (a newer release applied them).
    pub unknown: Vec<u32>,
    /// Applied versions whose SQL this release has in another form (a migration edited after
    /// it was released: a bug).
    pub modified: Vec<u32>,
}

impl MigrationStatus {
    /// Nothing pending, unknown or modified.
    pub fn is_current(&self) -> bool {
        self.pending.is_empty() && self.unknown.is_empty() && self.modified.is_empty()
    }

    /// The highest applied version (0 for none).
    pub fn version(&self) -> u32 {
        self.applied
            .iter()
            .map(|applied| applied.version)
            .max()
            .unwrap_or(0)
    }
}

impl fmt::Display for MigrationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |versions: &[u32]| {
            versions
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.initialized {
            return write!(
                f,
                "schema {} has no delayq tables: {} migration(s) pending (run `delayq migrate`)",
                self.schema,
                self.pending.len()
            );
        }
        write!(f, "schema {} is at version {}", self.schema, self.version())?;
        if self.is_current() {
            return write!(f, ", current");
        }
        if !self.pending.is_empty() {
            write!(
                f,
                "; pending: {} (run `delayq migrate`)",
                list(&self.pending)
            )?;
        }
        if !self.unknown.is_empty() {
            write!(f, "; applied by a newer release: {}", list(&self.unknown))?;
        }
        if !self.modified.is_empty() {
            write!(
                f,
                "; changed since they were applied: {}",
                list(&self.modified)
            )?;
        }
        Ok(())
    }
}

/// What [`Migrator::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The versions this call applied (empty when another migrator had done it, or nothing
    /// was pending).
    pub applied_now: Vec<u32>,
    /// The status afterwards.
    pub status: MigrationStatus,
}

/// Applies and inspects the migrations of one schema.
#[derive(Debug, Clone)]
pub struct Migrator {
    database: Database,
    migrations: &'static [Migration],
}

impl Migrator {
    /// This release's migrations ([`MIGRATIONS`]) for `database`'s schema.
    pub fn new(database: &Database) -> Self {
        Migrator {
            database: database.clone(),
            migrations: MIGRATIONS,
        }
    }

    /// Another migration set (a test's fixture of a previous release).
    ///
    /// # Panics
    /// When the versions do not count up from 1 without gaps (a bug in the set).
    pub fn with_migrations(database: &Database, migrations: &'static [Migration]) -> Self {
        for (index, migration) in migrations.iter().enumerate() {
            assert_eq!(
                migration.version as usize,
                index + 1,
                "migration {} is out of order",
                migration.name
            );
        }
        Migrator {
            database: database.clone(),
            migrations,
        }
    }

    /// The schema's status; reads only (works on a database without delayq's schema).
    pub async fn status(&self) -> Result<MigrationStatus> {
        let schema = self.database.schema().clone();
        let migrations = self.migrations;
        self.database
            .run("migration status", move |client| {
                let schema = schema.clone();
                Box::pin(async move { read_status(client, &schema, migrations).await })
            })
            .await
    }

    /// The status when it is current, else an error saying what is pending or unknown (for
    /// `delayq migrate --check` and read-only commands).
    pub async fn check(&self) -> Result<MigrationStatus> {
        let status = self.status().await?;
        if status.is_current() {
            Ok(status)
        } else {
            Err(Error::Database {
                operation: "migration check",
                class: ErrorClass::Permanent,
                code: None,
                message: status.to_string(),
            })
        }
    }

    /// Applies the pending migrations under the advisory lock; retried as a whole on a
    /// transient failure (each migration commits with its record, so a retry resumes).
    pub async fn apply(&self) -> Result<MigrationReport> {
        let started = std::time::Instant::now();
        let mut attempt = 1;
        loop {
            match self.apply_once().await {
                Err(error)
                    if self
                        .database
                        .pause_before_retry("migrate", started, attempt, &error)
                        .await =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn apply_once(&self) -> Result<MigrationReport> {
        let schema = self.database.schema().clone();
        let span = tracing::info_span!("migrate", schema = schema.name());
        async {
            let (client, connection) = self.database.connect_dedicated("migrate").await?;
            // The lock is the session's: it goes with the connection if anything below fails.
            let driver = tokio::spawn(async move {
                let _ = connection.await;
            });
            let result = self.apply_locked(&client, &schema).await;
            drop(client);
            let _ = driver.await;
            result
        }
        .instrument(span)
        .await
    }

    async fn apply_locked(&self, client: &Client, schema: &Schema) -> Result<MigrationReport> {
        let database = &self.database;
        let fail = |error: tokio_postgres::Error| database.error("migrate", &error);
        client
            .batch_execute(&format!(
                "SET statement_timeout = 0; SET lock_timeout = '{LOCK_WAIT}'"
            ))
            .await
            .map_err(fail)?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&lock_key(schema)])
            .await
            .map_err(fail)?;
        let exists: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[&schema.name()],
            )
            .await
            .map_err(fail)?
            .get(0);
        if !exists {
            client
                .batch_execute(&format!("CREATE SCHEMA {}", schema.quoted()))
                .await
                .map_err(fail)?;
        }
        client
            .batch_execute(&schema.substitute(
                "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
                     version    integer PRIMARY KEY,
                     name       text NOT NULL,
                     checksum   text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
                 )",
            ))
            .await
            .map_err(fail)?;
        let before = read_status(client, schema, self.migrations)
            .await
            .map_err(fail)?;
        let mut applied_now = Vec::new();
        for version in &before.pending {
            let Some(migration) = self.migrations.iter().find(|m| m.version == *version) else {
                continue;
            };
            self.apply_one(client, schema, migration).await?;
            applied_now.push(migration.version);
            tracing::info!(
                schema = schema.name(),
                version = migration.version,
                name = migration.name,
                "migration applied"
            );
        }
        if !before.unknown.is_empty() {
            tracing::warn!(schema = schema.name(), unknown = ?before.unknown, "schema has migrations of a newer release");
        }
        let status = read_status(client, schema, self.migrations)
            .await
            .map_err(fail)?;
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&lock_key(schema)])
            .await
            .map_err(fail)?;
        Ok(MigrationReport {
            applied_now,
            status,
        })
    }

    async fn apply_one(
        &self,
        client: &Client,
        schema: &Schema,
        migration: &Migration,
    ) -> Result<()> {
        let failed = |error: tokio_postgres::Error| Error::Migration {
            version: migration.version,
            name: migration.name,
            source: Box::new(self.database.error("migrate", &error)),
        };
        client.batch_execute("BEGIN").await.map_err(failed)?;
        let result = async {
            client
                .batch_execute(&schema.substitute(migration.sql))
                .await?;
            client
                .execute(
                    &schema.substitute(
                        "INSERT INTO {schema}.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    ),
                    &[&(migration.version as i32), &migration.name, &migration.checksum()],
                )
                .await?;
            client.batch_execute("COMMIT").await
        }
        .await;
        if let Err(error) = result {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(failed(error));
        }
        Ok(())
    }
}

/// The key of the migration lock of `schema` (one per schema, so two schemas in one
/// database migrate independently).
fn lock_key(schema: &Schema) -> i64 {
    fnv1a(format!("delayq.migrate.{}", schema.name()).as_bytes()) as i64
}

async fn read_status(
    client: &Client,
    schema: &Schema,
    migrations: &[Migration],
) -> std::result::Result<MigrationStatus, tokio_postgres::Error> {
    let table = format!("{}.schema_migrations", schema.quoted());
    let initialized: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await?
        .get(0);
    let mut applied = Vec::new();
    if initialized {
        let rows = client
            .query(
                &format!("SELECT version, name, checksum FROM {table} ORDER BY version"),
                &[],
            )
            .await?;
        for row in rows {
            let version: i32 = row.get(0);
            applied.push(AppliedMigration {
                version: version.max(0) as u32,
                name: row.get(1),
                checksum: row.get(2),
            });
        }
    }
    let pending = migrations
        .iter()
        .filter(|migration| !applied.iter().any(|done| done.version == migration.version))
        .map(|migration| migration.version)
        .collect();
    let unknown = applied
        .iter()
        .filter(|done| !migrations.iter().any(|m| m.version == done.version))
        .map(|done| done.version)
        .collect();
    let modified = applied
        .iter()
        .filter(|done| {
            migrations
                .iter()
                .any(|m| m.version == done.version && m.checksum() != done.checksum)
        })
        .map(|done| done.version)
        .collect();
    Ok(MigrationStatus {
        schema: schema.name().to_owned(),
        initialized,
        applied,
        pending,
        unknown,
        modified,
    })
}
