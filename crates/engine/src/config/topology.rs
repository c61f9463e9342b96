//! The Redis topology keys of `redis:`: exactly one of `url` (one server, the default),
//! `cluster` (Redis Cluster seed URLs) and `sentinel` (`urls`, `master`), with `tls` files and
//! `wait_replicas` beside any of them; their environment overrides; and the
//! [`ConnectOptions`] the storage and coordinator layers connect with.

use std::path::PathBuf;
use std::time::Duration;

use delayq_redis::{ConnectOptions, Credentials, Timeouts, TlsOptions, Topology};

use super::error::ConfigError;
use super::types::Config;
use super::validate::redact_password;

/// The keys of `redis.sentinel:`.
pub(crate) const SENTINEL_KEYS: &[&str] = &["urls", "master", "username", "password"];
/// The keys of `redis.tls:`.
pub(crate) const TLS_KEYS: &[&str] = &["ca_file", "cert_file", "key_file"];
/// The three keys of which exactly one names the Redis to use.
pub(crate) const TOPOLOGY_KEYS: [&str; 3] = ["redis.url", "redis.cluster", "redis.sentinel"];

/// The environment variables that choose the topology, with the key each one sets.
/// `DELAYQ_REDIS_SENTINEL_MASTER` goes with `DELAYQ_REDIS_SENTINEL`.
pub(crate) const TOPOLOGY_ENV: [(&str, &str); 3] = [
    ("DELAYQ_REDIS_URL", "redis.url"),
    ("DELAYQ_REDIS_CLUSTER", "redis.cluster"),
    ("DELAYQ_REDIS_SENTINEL", "redis.sentinel"),
];

/// `redis.sentinel`: a master watched by Redis Sentinel.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SentinelConfig {
    /// The sentinels' URLs (`redis://host:26379`); `user:password@` in them logs in to the
    /// master and replicas (the data nodes).
    pub urls: Vec<String>,
    /// The master's name as the sentinels know it (`sentinel monitor <name> ...`).
    pub master: String,
    /// The sentinels' own ACL user, when they require one.
    pub username: Option<String>,
    /// The sentinels' own password (`requirepass` of the sentinels), when they require one.
    pub password: Option<String>,
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|url| redact_password(url)).collect();
        f.debug_struct("SentinelConfig")
            .field("urls", &urls)
            .field("master", &self.master)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// `redis.tls`: files for `rediss://` connections (a private CA, client certificates).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsConfig {
    /// PEM CA certificate(s) that signed the servers' certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers with `tls-auth-clients yes`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's PEM private key.
    pub key_file: Option<PathBuf>,
}

impl Config {
    /// What the storage and coordinator layers connect with: the topology (`redis.sentinel`,
    /// else `redis.cluster`, else `redis.url`), the TLS files, and the timeouts
    /// (`redis.response_timeout`, `node.start_timeout`).
    pub fn connect_options(&self) -> ConnectOptions {
        let redis = &self.redis;
        let topology = if let Some(sentinel) = &redis.sentinel {
            let credentials = sentinel
                .password
                .as_deref()
                .map(|password| Credentials::new(sentinel.username.as_deref(), password));
            Topology::Sentinel {
                urls: sentinel.urls.clone(),
                master: sentinel.master.clone(),
                sentinel_credentials: credentials,
            }
        } else if !redis.cluster.is_empty() {
            Topology::cluster(redis.cluster.iter().cloned())
        } else {
            Topology::standalone(redis.url.clone())
        };
        let defaults = Timeouts::default();
        let timeouts = Timeouts {
            connect: defaults.connect.min(redis.response_timeout),
            response: redis.response_timeout,
            start: self.node.start_timeout,
            failover: defaults.failover,
        };
        let options = ConnectOptions::new(topology).with_timeouts(timeouts);
        match &redis.tls {
            Some(tls) => options.with_tls(TlsOptions {
                ca_file: tls.ca_file.clone(),
                cert_file: tls.cert_file.clone(),
                key_file: tls.key_file.clone(),
            }),
            None => options,
        }
    }

    /// `redis.wait_replicas` and `redis.wait_timeout`, when writes must wait for replicas.
    pub fn wait_for_replicas(&self) -> Option<(u32, Duration)> {
        (self.redis.wait_replicas > 0)
            .then_some((self.redis.wait_replicas, self.redis.wait_timeout))
    }

    /// Applies the topology variables of [`TOPOLOGY_ENV`] as `get` reports them. Each one
    /// replaces whatever topology the file chose. Returns the keys set.
    pub(crate) fn apply_topology_env(
        &mut self,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Vec<&'static str> {
        let mut applied = Vec::new();
        let list = |value: String| -> Vec<String> {
            value
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_owned)
                .collect()
        };
        for (variable, key) in TOPOLOGY_ENV {
            let Some(value) = get(variable).filter(|value| !value.is_empty()) else {
                continue;
            };
            let redis = &mut self.redis;
            match key {
                "redis.url" => {
                    redis.url = value;
                    redis.cluster.clear();
                    redis.sentinel = None;
                }
                "redis.cluster" => {
                    redis.cluster = list(value);
                    redis.sentinel = None;
                }
                _ => {
                    let master = get("DELAYQ_REDIS_SENTINEL_MASTER").unwrap_or_default();
                    let previous = redis.sentinel.take().unwrap_or_default();
                    redis.sentinel = Some(SentinelConfig {
                        urls: list(value),
                        master,
                        ..previous
                    });
                    redis.cluster.clear();
                }
            }
            tracing::debug!(variable, key, "environment overrides the configuration");
            applied.push(key);
        }
        applied
    }
}

/// The error for two topology variables set at once, if they are.
pub(crate) fn topology_env_conflict(get: &impl Fn(&str) -> Option<String>) -> Option<ConfigError> {
    let set: Vec<&str> = TOPOLOGY_ENV
        .iter()
        .filter(|(variable, _)| get(variable).is_some_and(|value| !value.is_empty()))
        .map(|(variable, _)| *variable)
        .collect();
    (set.len() > 1).then(|| ConfigError::InvalidValue {
        key: "redis".to_owned(),
        value: set.join(" + "),
        reason: format!(
            "set exactly one of {}: each names the whole topology",
            TOPOLOGY_ENV.map(|(variable, _)| variable).join(", ")
        ),
        line: None,
    })
}
