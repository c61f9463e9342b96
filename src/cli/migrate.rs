//! `delayq migrate [--check]`: applies delayq's schema migrations to the configured
//! PostgreSQL, or only reports what is pending.
//!
//! Nodes and writing commands apply the migrations themselves at start (under the same
//! advisory lock), so this command is for pipelines that migrate before they deploy and for
//! checking a database: `--check` exits 1 while anything is pending.

use delayq_engine::config::{Backend, Config};
use delayq_postgres::{Database, MigrationStatus, Migrator};
use serde_json::json;

use super::error::{CliError, CliResult};
use super::output::{print_json, write_stdout};

/// Examples shown by `delayq migrate --help`.
pub const MIGRATE_EXAMPLES: &str = "\
Examples:
  DELAYQ_BACKEND=postgres DELAYQ_POSTGRES_URL=postgres://delayq:pw@db/app delayq migrate
  delayq --config cluster.yaml migrate --check   # exit 1 while migrations are pending
  delayq migrate --check --json";

/// Arguments of `delayq migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// Apply nothing: print where the schema stands and exit 1 when migrations are pending.
    #[arg(long)]
    pub check: bool,
}

/// Runs `delayq migrate`.
pub async fn run(args: MigrateArgs, json: bool, config: Config) -> CliResult<()> {
    if config.backend != Backend::Postgres {
        return Err(CliError::Usage(format!(
            "delayq migrate works on the PostgreSQL backend (backend: postgres, or \
             DELAYQ_BACKEND=postgres); the configured backend is {}, which needs no migrations",
            config.backend
        )));
    }
    let database = Database::new(&config.postgres_settings())?;
    let migrator = Migrator::new(&database);
    let (applied_now, status) = if args.check {
        (Vec::new(), migrator.status().await?)
    } else {
        let report = migrator.apply().await?;
        (report.applied_now, report.status)
    };
    report(json, &applied_now, &status)?;
    if args.check && !(status.pending.is_empty() && status.modified.is_empty()) {
        return Err(CliError::Runtime(status.to_string()));
    }
    Ok(())
}

/// Prints the outcome: one line for a person, or an object with `--json`.
fn report(json: bool, applied_now: &[u32], status: &MigrationStatus) -> CliResult<()> {
    if json {
        return print_json(&json!({
            "schema": status.schema,
            "version": status.version(),
            "applied_now": applied_now,
            "pending": status.pending,
            "unknown": status.unknown,
            "modified": status.modified,
            "current": status.is_current(),
        }));
    }
    let mut line = String::new();
    if !applied_now.is_empty() {
        let versions: Vec<String> = applied_now.iter().map(u32::to_string).collect();
        line.push_str(&format!("applied {}; ", versions.join(", ")));
    }
    line.push_str(&status.to_string());
    line.push('\n');
    write_stdout(&line)
}
