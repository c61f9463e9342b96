//! delayq's configuration: the types, their defaults, and loading `cluster.yaml`.
//!
//! # Format
//!
//! The file has optional sections `backend` (`redis` or `postgres`), `redis`, `postgres`,
//! `http`, `node`, `engine`, `queue_defaults`, `queues` and `recurring`; the repository's `cluster.yaml` documents every key and its default. Durations
//! are [humantime](https://docs.rs/humantime) strings (`500ms`, `30s`, `1h 30m`); sizes are
//! bytes or `512KiB`/`1MiB`. A missing section or key takes its default; a queue listed under
//! `queues:` starts from `queue_defaults` and overrides what it names; a queue not listed
//! uses `queue_defaults` ([`Config::queue`]). Unknown keys, bad values and broken rules are
//! errors naming the dotted key (`engine.pul_period`), the value and the line.
//!
//! The environment overrides the file: `DELAYQ_BACKEND`, `DELAYQ_REDIS_URL`,
//! `DELAYQ_POSTGRES_URL`, `DELAYQ_KEY_PREFIX`, `DELAYQ_NODE_NAME`, `DELAYQ_HTTP_LISTEN`,
//! `DELAYQ_HTTP_TOKEN` ([`ENV_OVERRIDES`]).
//!
//! # Which YAML crate, and why
//!
//! YAML is parsed by [serde-saphyr](https://docs.rs/serde-saphyr): maintained, pure Rust,
//! panic-free on malformed input, rejects duplicate keys, and reports line and column.
//! `serde_yaml` is archived and flagged unmaintained (RUSTSEC-2024-0320). We deserialize into
//! a small tree whose keys and values carry their lines (`yaml.rs`) and walk it against the
//! schema (`schema.rs`), because `#[serde(deny_unknown_fields)]` names an unknown key but not
//! the section it sits in.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use delayq_engine::config::Config;
//!
//! let yaml = "
//! engine:
//!   lease: 1m
//! queues:
//!   order-timeout:
//!     concurrency: 8
//! ";
//! let config = Config::from_yaml_str(yaml, "cluster.yaml")?;
//! assert_eq!(config.engine.lease, Duration::from_secs(60));
//! assert_eq!(config.queue("order-timeout").concurrency, 8);
//! assert_eq!(config.queue("unlisted").concurrency, 64); // queue_defaults
//!
//! let typo = Config::from_yaml_str("engine:\n  pul_period: 1s\n", "cluster.yaml").unwrap_err();
//! assert!(typo.to_string().starts_with("cluster.yaml:2: unknown key `engine.pul_period`"));
//! # Ok::<(), delayq_engine::config::ConfigError>(())
//! ```

mod backend;
mod error;
mod http;
mod schema;
mod topology;
mod types;
mod validate;
mod values;
mod yaml;

#[cfg(test)]
mod tests;

use std::io;
use std::path::Path;

pub use backend::Backend;
pub use error::ConfigError;
pub use http::{
    HttpConfig, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUEST_TIMEOUT,
    MAX_MAX_CONNECTIONS,
};
pub use topology::{SentinelConfig, TlsConfig};
pub use types::{
    default_node_name, BackoffConfig, Config, EngineConfig, NodeConfig, QueueConfig, RateLimit,
    RedisConfig, DEFAULT_MAX_RUNNING,
};
pub use validate::{
    LEASE_RESPONSE_TIMEOUTS, MAX_CLAIM_BATCH, MAX_CONCURRENCY, MAX_NODE_NAME_CHARS, MAX_PARTITIONS,
    MAX_PAYLOAD_LIMIT, MAX_RUNNING, MAX_WAIT_REPLICAS,
};
pub use values::MAX_DURATION;

/// The file [`Config::load_or_default`] reads when no path is given, relative to the current
/// directory.
pub const DEFAULT_CONFIG_FILE: &str = "cluster.yaml";

/// The environment variables that override the file, with the key each one sets.
/// An empty variable counts as unset. The topology is chosen apart, by exactly one of
/// `DELAYQ_REDIS_URL`, `DELAYQ_REDIS_CLUSTER` (comma-separated seed URLs) and
/// `DELAYQ_REDIS_SENTINEL` (comma-separated sentinel URLs, with
/// `DELAYQ_REDIS_SENTINEL_MASTER`): each replaces the file's `redis.url`, `redis.cluster`
/// or `redis.sentinel`, and setting two of them is an error naming both. The backend is
/// chosen by `DELAYQ_BACKEND` (`redis` or `postgres`; anything else is an error naming the
/// variable) and `DELAYQ_POSTGRES_URL` replaces `postgres.url`.
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("DELAYQ_KEY_PREFIX", "redis.key_prefix"),
    ("DELAYQ_NODE_NAME", "node.name"),
    ("DELAYQ_HTTP_LISTEN", "http.listen"),
    ("DELAYQ_HTTP_TOKEN", "http.token"),
];

impl Config {
    /// Parses and validates `text`; `source` names it in error messages (usually the file
    /// name). The environment is not consulted.
    pub fn from_yaml_str(text: &str, source: &str) -> Result<Config, ConfigError> {
        finish(text, source, |_| None)
    }

    /// Reads the file at `path`, parses it, applies the environment overrides
    /// ([`ENV_OVERRIDES`]) and validates the result.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        load_file(path, env_var, MissingFile::Error)
    }

    /// Like [`Config::load`] for an explicit `path`, which must exist. Without one, reads
    /// `./cluster.yaml` if it exists, else starts from the defaults; the environment
    /// overrides and validation apply either way.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            Some(path) => load_file(path, env_var, MissingFile::Error),
            None => load_file(
                Path::new(DEFAULT_CONFIG_FILE),
                env_var,
                MissingFile::UseDefaults,
            ),
        }
    }

    /// Applies the environment overrides from the process environment ([`ENV_OVERRIDES`]).
    pub fn apply_env(&mut self) {
        self.apply_env_from(env_var);
    }

    /// Applies the overrides of [`ENV_OVERRIDES`] as `get` reports them: `get` maps a
    /// variable name to its value, so tests need not touch the process environment.
    pub fn apply_env_from(&mut self, get: impl Fn(&str) -> Option<String>) {
        self.apply_env_tracked(get);
    }

    /// Checks the rules a configuration must satisfy beyond its types (for instance
    /// `node.heartbeat_ttl` longer than `node.heartbeat_period`, non-zero partitions, valid
    /// queue names). The error names the first key at fault; it has no line, as a `Config`
    /// does not remember where its values came from (the loaders add it).
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::check(self)
    }

    /// The settings of queue `name`: its entry under `queues:`, else `queue_defaults`.
    pub fn queue(&self, name: &str) -> QueueConfig {
        self.queues
            .get(name)
            .copied()
            .unwrap_or(self.queue_defaults)
    }

    /// Applies the overrides and returns the keys they set.
    fn apply_env_tracked(&mut self, get: impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
        let mut applied = self.apply_topology_env(&get);
        applied.extend(self.apply_backend_env(&get));
        for &(variable, key) in ENV_OVERRIDES {
            let Some(value) = get(variable).filter(|value| !value.is_empty()) else {
                continue;
            };
            let slot = match key {
                "redis.key_prefix" => &mut self.redis.key_prefix,
                "node.name" => &mut self.node.name,
                "http.listen" => self.http.listen.insert(String::new()),
                "http.token" => self.http.token.insert(String::new()),
                _ => continue, // ENV_OVERRIDES names only the keys above
            };
            *slot = value;
            tracing::debug!(variable, key, "environment overrides the configuration");
            applied.push(key);
        }
        applied
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Parses `text`, applies the overrides from `get`, validates, and points any value error at
/// the line the value was written on (unless the environment supplied it).
fn finish(
    text: &str,
    source: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let schema::Parsed {
        mut config,
        mut lines,
    } = schema::parse(text, source)?;
    if let Some(conflict) = topology::topology_env_conflict(&get) {
        return Err(conflict);
    }
    if let Some(error) = backend::backend_env_error(&get) {
        return Err(error);
    }
    for key in config.apply_env_tracked(get) {
        lines.forget(key);
    }
    config.validate().map_err(|error| lines.locate(error))?;
    Ok(config)
}

/// What [`load_file`] does when the file does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MissingFile {
    Error,
    UseDefaults,
}

/// Reads, parses, overrides (from `get`) and validates the file at `path`.
fn load_file(
    path: &Path,
    get: impl Fn(&str) -> Option<String>,
    missing: MissingFile,
) -> Result<Config, ConfigError> {
    let config = match std::fs::read_to_string(path) {
        Ok(text) => finish(&text, &path.display().to_string(), get)?,
        Err(error)
            if error.kind() == io::ErrorKind::NotFound && missing == MissingFile::UseDefaults =>
        {
            tracing::info!(path = %path.display(), "no configuration file, using the defaults");
            if let Some(conflict) = topology::topology_env_conflict(&get) {
                return Err(conflict);
            }
            if let Some(error) = backend::backend_env_error(&get) {
                return Err(error);
            }
            let mut config = Config::default();
            config.apply_env_from(get);
            config.validate()?;
            return Ok(config);
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    tracing::info!(path = %path.display(), queues = config.queues.len(), "configuration loaded");
    Ok(config)
}
