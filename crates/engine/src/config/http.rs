//! The `http:` section: where the HTTP API, the dashboard and `/metrics` listen, the token
//! that guards them, and the read-only switch. The `delayq-http` crate serves them; the
//! engine only carries the settings, so one `cluster.yaml` configures a whole node.

use std::fmt;
use std::net::SocketAddr;

use super::error::ConfigError;

/// The `http:` section. Its `Debug` output hides the token.
#[derive(Clone, PartialEq, Eq, Default)]
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
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("read_only", &self.read_only)
            .field("allowed_hosts", &self.allowed_hosts)
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

    /// Checks the section: a parsable address, a non-empty token.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
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
