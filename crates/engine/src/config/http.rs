//! The `http:` section: where the HTTP API, the dashboard and `/metrics` listen, the token
//! that guards them, the read-only switch, and the limits on slow and idle clients. The `delayq-http` crate serves them; the
//! engine only carries the settings, so one `cluster.yaml` configures a whole node.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use super::error::ConfigError;

/// Default `http.header_timeout`: how long a client may take to send a request head.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `http.request_timeout`: how long a request may take to be answered.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `http.max_connections`: connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Largest `http.max_connections` accepted (each connection holds a file descriptor).
pub const MAX_MAX_CONNECTIONS: usize = 1_000_000;

/// The `http:` section. Its `Debug` output hides the token.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The address the API, dashboard and `/metrics` listen on (`127.0.0.1:7070`); `None`
    /// (the default) serves nothing unless `delayq serve` or `delayq node --listen` asks.
    pub listen: Option<String>,
    /// The bearer token `/v1` and the dashboard's actions require; `None`: no token.
    /// `/healthz`, `/readyz` and `/metrics` stay open.
    pub token: Option<String>,
    /// Refuse every change (schedule, cancel, retry, purge) with 403.
    pub read_only: bool,
    /// Host names accepted in a request's `Host` besides the listen address and loopback
    /// (`delayq.internal`); any other name is refused with 421, so DNS rebinding cannot turn
    /// a web page into a client of a local delayq.
    pub allowed_hosts: Vec<String>,
    /// How long a client may take to send a request's head (request line and headers), and
    /// how long a kept-alive connection may sit idle before its next request: beyond it the
    /// connection is closed. Default 10 s.
    pub header_timeout: Duration,
    /// How long a request (its body included) may take to be answered; beyond it the answer
    /// is 503. Default 30 s.
    pub request_timeout: Duration,
    /// Most connections served at once; beyond it new connections wait in the listen backlog
    /// (holding no file descriptor of the process) until one closes. Default 512.
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: None,
            token: None,
            read_only: false,
            allowed_hosts: Vec::new(),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("read_only", &self.read_only)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("header_timeout", &self.header_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

impl HttpConfig {
    /// The listen address, parsed (`None` when not set).
    ///
    /// # Errors
    /// `InvalidValue` naming `http.listen` when it is not `IP:PORT`.
    pub fn listen_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(listen) = &self.listen else {
            return Ok(None);
        };
        listen
            .trim()
            .parse::<SocketAddr>()
            .map(Some)
            .map_err(|error| ConfigError::InvalidValue {
                key: "http.listen".to_owned(),
                value: listen.clone(),
                reason: format!("{error}; expected IP:PORT such as 127.0.0.1:7070"),
                line: None,
            })
    }

    /// Checks the section: a parsable address, a non-empty token, timeouts longer than zero
    /// and `1..=`[`MAX_MAX_CONNECTIONS`] connections.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        for (key, timeout) in [
            ("http.header_timeout", self.header_timeout),
            ("http.request_timeout", self.request_timeout),
        ] {
            if timeout.is_zero() {
                return Err(ConfigError::InvalidValue {
                    key: key.to_owned(),
                    value: humantime::format_duration(timeout).to_string(),
                    reason: "must be longer than zero (a client that never sends would hold its connection forever)".to_owned(),
                    line: None,
                });
            }
        }
        if !(1..=MAX_MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(ConfigError::InvalidValue {
                key: "http.max_connections".to_owned(),
                value: self.max_connections.to_string(),
                reason: format!("must be between 1 and {MAX_MAX_CONNECTIONS}"),
                line: None,
            });
        }
        if self
            .token
            .as_deref()
            .is_some_and(|token| token.trim().is_empty())
        {
            return Err(ConfigError::InvalidValue {
                key: "http.token".to_owned(),
                value: String::new(),
                reason: "an empty token would let anyone in; leave the key out for no token"
                    .to_owned(),
                line: None,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Config;

    #[test]
    fn http_section_parses_and_hides_the_token() {
        let yaml = "http:\n  listen: 127.0.0.1:7070\n  token: s3cret\n  read_only: true\n";
        let config = Config::from_yaml_str(yaml, "cluster.yaml").expect("valid");
        assert_eq!(config.http.listen.as_deref(), Some("127.0.0.1:7070"));
        assert_eq!(config.http.token.as_deref(), Some("s3cret"));
        assert!(config.http.read_only);
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn http_errors_name_the_key_and_line() {
        let bad = Config::from_yaml_str("http:\n  listen: nowhere\n", "c.yaml")
            .expect_err("not an address");
        assert!(
            bad.to_string().contains("http.listen") && bad.to_string().contains("line 2"),
            "{bad}"
        );
        let typo = Config::from_yaml_str("http:\n  tokn: x\n", "c.yaml").expect_err("unknown key");
        assert!(typo.to_string().contains("http.tokn"), "{typo}");
        assert!(typo.to_string().contains("read_only"), "{typo}");
    }

    #[test]
    fn http_limits_parse_and_default() {
        let defaults =
            Config::from_yaml_str("http:\n  read_only: false\n", "c.yaml").expect("valid");
        assert_eq!(defaults.http.header_timeout, Duration::from_secs(10));
        assert_eq!(defaults.http.request_timeout, Duration::from_secs(30));
        assert_eq!(defaults.http.max_connections, 512);
        let yaml = "http:\n  header_timeout: 1500ms\n  request_timeout: 1m\n  max_connections: 8\n";
        let config = Config::from_yaml_str(yaml, "c.yaml").expect("valid");
        assert_eq!(config.http.header_timeout, Duration::from_millis(1500));
        assert_eq!(config.http.request_timeout, Duration::from_secs(60));
        assert_eq!(config.http.max_connections, 8);
    }

    #[test]
    fn http_limit_errors_name_the_key_and_value() {
        for (yaml, key, value) in [
            ("http:\n  header_timeout: 0\n", "http.header_timeout", "0s"),
            (
                "http:\n  request_timeout: 0s\n",
                "http.request_timeout",
                "0s",
            ),
            ("http:\n  header_timeout: 10\n", "http.header_timeout", "10"),
            (
                "http:\n  request_timeout: soon\n",
                "http.request_timeout",
                "soon",
            ),
            ("http:\n  max_connections: 0\n", "http.max_connections", "0"),
            (
                "http:\n  max_connections: -3\n",
                "http.max_connections",
                "-3",
            ),
            (
                "http:\n  max_connections: 2000000\n",
                "http.max_connections",
                "2000000",
            ),
            (
                "http:\n  max_connections: many\n",
                "http.max_connections",
                "many",
            ),
        ] {
            let error = Config::from_yaml_str(yaml, "c.yaml").expect_err(yaml);
            let text = error.to_string();
            assert!(
                text.contains(key) && text.contains(value) && text.contains("line 2"),
                "{yaml:?}: {text}"
            );
        }
    }

    #[test]
    fn http_env_overrides_the_file() {
        let mut config = Config::default();
        config.apply_env_from(|name| match name {
            "DELAYQ_HTTP_LISTEN" => Some("0.0.0.0:9999".to_owned()),
            "DELAYQ_HTTP_TOKEN" => Some("t0k".to_owned()),
            _ => None,
        });
        assert_eq!(config.http.listen.as_deref(), Some("0.0.0.0:9999"));
        assert_eq!(config.http.token.as_deref(), Some("t0k"));
    }
}
