//! Which database holds the cluster (`backend:`), and the `postgres:` section used when it
//! is PostgreSQL.
//!
//! `backend: redis` (the default) reads the `redis:` section; `backend: postgres` reads
//! `postgres:` and ignores `redis:` (a file may keep both, to switch with `DELAYQ_BACKEND`).
//! The in-memory twin is chosen in code ([`crate::SchedulerBuilder::memory`]), never here.

use std::fmt;
use std::str::FromStr;

use delayq_postgres::PostgresConfig;

use super::error::ConfigError;
use super::types::Config;

/// The keys of `postgres:` a file may set. The driver's own connection knobs (connect
/// timeout, `application_name`) keep their defaults; the URL may carry libpq parameters.
pub(crate) const POSTGRES_KEYS: &[&str] = &["url", "schema", "pool_size", "statement_timeout"];

/// The variables that choose and locate the backend, with the key each one sets.
pub(crate) const BACKEND_ENV: [(&str, &str); 2] = [
    ("DELAYQ_BACKEND", "backend"),
    ("DELAYQ_POSTGRES_URL", "postgres.url"),
];

/// The database that holds tasks, membership and the cluster clock (`backend:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Redis, Redis Cluster or Sentinel: the `redis:` section (the default).
    #[default]
    Redis,
    /// PostgreSQL: the `postgres:` section.
    Postgres,
}

impl Backend {
    /// The spellings accepted in the file and in `DELAYQ_BACKEND`.
    pub const NAMES: [&'static str; 2] = ["redis", "postgres"];

    /// The name as written in the file.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;

    /// `redis` or `postgres` (`postgresql` too, as libpq spells its URLs); the error is the
    /// reason, for a [`ConfigError::InvalidValue`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "redis" => Ok(Backend::Redis),
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            _ => Err(format!("expected one of {}", Backend::NAMES.join(", "))),
        }
    }
}

impl Config {
    /// Applies `DELAYQ_BACKEND` and `DELAYQ_POSTGRES_URL` as `get` reports them; returns the
    /// keys set. A `DELAYQ_BACKEND` that names no backend is left out here and reported by
    /// [`backend_env_error`] before any override applies.
    pub(crate) fn apply_backend_env(
        &mut self,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Vec<&'static str> {
        let mut applied = Vec::new();
        for (variable, key) in BACKEND_ENV {
            let Some(value) = get(variable).filter(|value| !value.is_empty()) else {
                continue;
            };
            match key {
                "backend" => match value.parse() {
                    Ok(backend) => self.backend = backend,
                    Err(_) => continue,
                },
                _ => self.postgres.url = value,
            }
            tracing::debug!(variable, key, "environment overrides the configuration");
            applied.push(key);
        }
        applied
    }

    /// The driver's settings for this node: `postgres.*`, with `application_name` naming
    /// the node (`delayq node-name`, as `pg_stat_activity` shows it).
    pub fn postgres_settings(&self) -> PostgresConfig {
        let mut settings = self.postgres.clone();
        let name: String = format!("delayq {}", self.node.name)
            .chars()
            .filter(|c| c.is_ascii_graphic() || *c == ' ')
            .take(63)
            .collect();
        settings.application_name = name;
        settings
    }
}

/// The error for a `DELAYQ_BACKEND` that names no backend, if it is set to one.
pub(crate) fn backend_env_error(get: &impl Fn(&str) -> Option<String>) -> Option<ConfigError> {
    let value = get("DELAYQ_BACKEND").filter(|value| !value.is_empty())?;
    let reason = value.parse::<Backend>().err()?;
    Some(ConfigError::InvalidValue {
        key: "backend (DELAYQ_BACKEND)".to_owned(),
        value,
        reason,
        line: None,
    })
}

/// `postgres.*` when the backend is PostgreSQL: the URL parses, the schema is an identifier,
/// the pool has a connection. The driver's error names the key and the (redacted) value.
pub(crate) fn check(config: &Config) -> Result<(), ConfigError> {
    if config.backend != Backend::Postgres {
        return Ok(());
    }
    config.postgres.validate().map_err(|error| match error {
        delayq_postgres::Error::InvalidConfig {
            field,
            value,
            reason,
        } => ConfigError::InvalidValue {
            key: field.to_owned(),
            value,
            reason,
            line: None,
        },
        other => ConfigError::InvalidValue {
            key: "postgres".to_owned(),
            value: config.postgres.redacted_url(),
            reason: other.to_string(),
            line: None,
        },
    })
}
