//! What to connect to: one server, a Redis Cluster or a Sentinel-watched master, with TLS
//! files and timeouts. Plain structs; reading them from configuration happens elsewhere.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::redact::redact_url;

/// A login: an ACL user name (none: the `default` user) and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The ACL user; `None` logs in as `default` (`requirepass`).
    pub username: Option<String>,
    /// The password. Never printed: `Debug` shows `***`.
    pub password: String,
}

impl Credentials {
    /// A login as `username` (or `default` when `None`) with `password`.
    pub fn new(username: Option<&str>, password: &str) -> Self {
        Credentials {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// The shape of the Redis deployment.
///
/// Every URL may carry an ACL login (`redis://user:password@host:port/db`) and may use TLS
/// (`rediss://`); see [`TlsOptions`] for a private CA or client certificates.
#[derive(Clone, PartialEq, Eq)]
pub enum Topology {
    /// One server (the default).
    Standalone {
        /// `redis://[user:password@]host:port[/db]` or `rediss://...`.
        url: String,
    },
    /// A Redis Cluster, discovered from any of its nodes.
    Cluster {
        /// Seed node URLs; the login and TLS of the first one are used for every node.
        seeds: Vec<String>,
    },
    /// A master watched by Redis Sentinel: the master's address is asked of the sentinels at
    /// start and again on any sign of a failover.
    Sentinel {
        /// Sentinel URLs. Their login (`user:password@`) and database are the ones used on the
        /// master (the data node), not on the sentinels.
        urls: Vec<String>,
        /// The monitored master's name (`sentinel monitor <name> ...`).
        master: String,
        /// The sentinels' own login, when they require one (`requirepass`/`user` in
        /// sentinel.conf); `None` talks to the sentinels without logging in.
        sentinel_credentials: Option<Credentials>,
    },
}

impl Topology {
    /// One server at `url`.
    pub fn standalone(url: impl Into<String>) -> Self {
        Topology::Standalone { url: url.into() }
    }

    /// A Redis Cluster reached through `seeds`.
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Self {
        Topology::Cluster {
            seeds: seeds.into_iter().map(Into::into).collect(),
        }
    }

    /// The master named `master`, found through the sentinels at `urls` (no sentinel login).
    pub fn sentinel<S: Into<String>>(
        urls: impl IntoIterator<Item = S>,
        master: impl Into<String>,
    ) -> Self {
        Topology::Sentinel {
            urls: urls.into_iter().map(Into::into).collect(),
            master: master.into(),
            sentinel_credentials: None,
        }
    }

    /// Which of the three shapes this is.
    pub fn kind(&self) -> TopologyKind {
        match self {
            Topology::Standalone { .. } => TopologyKind::Standalone,
            Topology::Cluster { .. } => TopologyKind::Cluster,
            Topology::Sentinel { .. } => TopologyKind::Sentinel,
        }
    }

    /// Every URL of the topology.
    pub fn urls(&self) -> &[String] {
        match self {
            Topology::Standalone { url } => std::slice::from_ref(url),
            Topology::Cluster { seeds } => seeds,
            Topology::Sentinel { urls, .. } => urls,
        }
    }

    /// A one-line description for logs and errors, with every password removed.
    pub fn describe(&self) -> String {
        let urls: Vec<String> = self.urls().iter().map(|url| redact_url(url)).collect();
        match self {
            Topology::Standalone { .. } => urls.join(","),
            Topology::Cluster { .. } => format!("cluster [{}]", urls.join(",")),
            Topology::Sentinel { master, .. } => {
                format!("master {master} via sentinels [{}]", urls.join(","))
            }
        }
    }

    /// The passwords this topology carries (URLs and sentinel login), scrubbed from messages.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut secrets: Vec<String> = self
            .urls()
            .iter()
            .filter_map(|url| crate::redact::url_password(url))
            .collect();
        if let Topology::Sentinel {
            sentinel_credentials: Some(credentials),
            ..
        } = self
        {
            secrets.push(credentials.password.clone());
        }
        secrets.retain(|secret| !secret.is_empty());
        secrets
    }
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The three shapes, without their details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyKind {
    /// One server.
    Standalone,
    /// A Redis Cluster.
    Cluster,
    /// A master found through Redis Sentinel.
    Sentinel,
}

/// TLS files, used with `rediss://` URLs. Without any, the system's roots verify the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file with the CA certificate(s) that signed the servers' certificates.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers that verify clients (`tls-auth-clients yes`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// How long connecting and answering may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// One TCP (and TLS) connection attempt.
    pub connect: Duration,
    /// One command's answer.
    pub response: Duration,
    /// Connecting at start: attempts are retried with backoff until this runs out, except a
    /// refused login, which fails at once.
    pub start: Duration,
    /// How long a command that certainly did not run (`READONLY`, `LOADING`, `MASTERDOWN`,
    /// `CLUSTERDOWN`, `TRYAGAIN`, no master reachable) is retried while the topology changes.
    pub failover: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(1),
            response: Duration::from_secs(2),
            start: Duration::from_secs(10),
            failover: Duration::from_secs(10),
        }
    }
}

/// Everything [`crate::RedisConnection::connect`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// What to connect to.
    pub topology: Topology,
    /// TLS files for `rediss://` URLs.
    pub tls: Option<TlsOptions>,
    /// Connection, response, start and failover timeouts.
    pub timeouts: Timeouts,
    /// Whether scripts that belong to a [`crate::Library`] are called as Redis Functions
    /// (`FCALL`, the default) or as `EVALSHA` scripts. Functions are used only where the
    /// server has them (Redis 7+) and the user may load and call them; elsewhere the scripts
    /// are used anyway. The default is read from `DELAYQ_REDIS_FUNCTIONS` (`off`, `0` or
    /// `false`: scripts), for operators and tests that must force the fallback.
    pub functions: bool,
}

/// The environment variable that turns Redis Functions off (`off`, `0`, `false`).
pub const FUNCTIONS_ENV: &str = "DELAYQ_REDIS_FUNCTIONS";

/// Whether [`FUNCTIONS_ENV`] leaves Functions on.
fn functions_from_env() -> bool {
    match std::env::var(FUNCTIONS_ENV) {
        Ok(value) => !matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "off" | "0" | "false" | "no"
        ),
        Err(_) => true,
    }
}

impl ConnectOptions {
    /// Options for `topology` with default timeouts, no TLS files, and Functions unless
    /// [`FUNCTIONS_ENV`] turns them off.
    pub fn new(topology: Topology) -> Self {
        ConnectOptions {
            topology,
            tls: None,
            timeouts: Timeouts::default(),
            functions: functions_from_env(),
        }
    }

    /// The same options with Functions on or off (see [`ConnectOptions::functions`]).
    pub fn with_functions(mut self, functions: bool) -> Self {
        self.functions = functions;
        self
    }

    /// The same options with TLS files.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The same options with other timeouts.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_and_debug_never_show_passwords() {
        let topology = Topology::Sentinel {
            urls: vec!["redis://app:s3cret@10.0.0.1:26379".to_owned()],
            master: "mymaster".to_owned(),
            sentinel_credentials: Some(Credentials::new(None, "sentinel-pw")),
        };
        let shown = format!("{topology:?} {}", topology.describe());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("master mymaster via sentinels"), "{shown}");
        assert!(!format!("{:?}", Credentials::new(Some("u"), "pw-123")).contains("pw-123"));
        assert_eq!(
            topology.secrets(),
            vec!["s3cret".to_owned(), "sentinel-pw".to_owned()]
        );
    }
}
