//! Error classes: what a failover or a lost connection looks like ([`is_transient`]), what
//! certainly did not run (and may be sent again), and the typed [`Error`] of this crate.
//!
//! No message of this crate carries a password: targets are shown through
//! [`crate::redact_url`] and server or library messages are scrubbed of the configured
//! passwords.

use std::path::PathBuf;

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

/// A failure of the connection layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting cannot be used.
    #[error("invalid Redis setting {field} = {value}: {reason}")]
    InvalidConfig {
        /// The setting, e.g. `redis.url` or `redis.tls.key_file`.
        field: &'static str,
        /// Its value, with any password removed.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A TLS file could not be read.
    #[error("cannot read {field} file {}: {reason}", path.display())]
    TlsFile {
        /// `redis.tls.ca_file`, `redis.tls.cert_file` or `redis.tls.key_file`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The server refused the login (wrong user or password). Never retried.
    #[error("Redis at {target} refused the login: {message}")]
    Authentication {
        /// The server, without password.
        target: String,
        /// Redis's message (it never contains the password).
        message: String,
    },
    /// No connection could be made before the start timeout ran out.
    #[error("Redis at {target} unreachable after {waited_ms} ms: {message}")]
    Unreachable {
        /// The topology, without passwords.
        target: String,
        /// How long the attempts took.
        waited_ms: u64,
        /// The last attempt's failure.
        message: String,
    },
    /// `WAIT` saw fewer replicas acknowledge the write than asked for.
    #[error(
        "only {confirmed} of {wanted} replicas confirmed the write within {timeout_ms} ms \
         (redis.wait_replicas); the write is on the master but may be lost in a failover"
    )]
    ReplicasNotConfirmed {
        /// `redis.wait_replicas`.
        wanted: u32,
        /// How many replicas acknowledged in time.
        confirmed: u32,
        /// `redis.wait_timeout` in milliseconds.
        timeout_ms: u64,
    },
    /// A command failed.
    #[error("{operation} failed ({}): {message}", if *transient { "transient" } else { "permanent" })]
    Command {
        /// What was being done, e.g. `EVALSHA` or `publish`.
        operation: &'static str,
        /// Whether trying again later may succeed ([`is_transient`]).
        transient: bool,
        /// The server's error code (`NOPERM`, `READONLY`, a script's own code), if any.
        code: Option<String>,
        /// The message, scrubbed of passwords.
        message: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether trying again later may succeed: a lost connection, a timeout, a failover in
    /// progress. Configuration, login and permission errors are permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Command { transient, .. } => *transient,
            Error::Unreachable { .. } | Error::ReplicasNotConfirmed { .. } => true,
            Error::InvalidConfig { .. } | Error::TlsFile { .. } | Error::Authentication { .. } => {
                false
            }
        }
    }

    /// A copy of this error for each call of a group that failed together (the error itself
    /// is not `Clone`: a connection failure's source is not). A command error and a `WAIT`
    /// shortfall are copied as they are; any other error becomes a command error of
    /// `operation` with the same message and transience.
    pub fn copy_for_group(&self, operation: &'static str) -> Error {
        match self {
            Error::Command {
                operation,
                transient,
                code,
                message,
            } => Error::Command {
                operation,
                transient: *transient,
                code: code.clone(),
                message: message.clone(),
            },
            Error::ReplicasNotConfirmed {
                wanted,
                confirmed,
                timeout_ms,
            } => Error::ReplicasNotConfirmed {
                wanted: *wanted,
                confirmed: *confirmed,
                timeout_ms: *timeout_ms,
            },
            other => Error::Command {
                operation,
                transient: other.is_transient(),
                code: None,
                message: other.to_string(),
            },
        }
    }

    /// The typed error for a redis-rs error of `operation`, with `secrets` scrubbed.
    pub(crate) fn from_redis(
        operation: &'static str,
        error: &RedisError,
        secrets: &[String],
    ) -> Self {
        Error::Command {
            operation,
            transient: is_transient(error),
            code: error.code().map(str::to_owned),
            message: crate::redact::scrub(&error.to_string(), secrets),
        }
    }
}

/// Whether `error` says "not now" rather than "no": `READONLY` (a demoted master),
/// `LOADING`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, `MOVED`/`ASK` (a slot in motion), a lost
/// or refused connection, a timeout, a cluster node not found, or sentinels that know no usable
/// master yet. Everything else (a script error, `NOPERM`, a wrong type, a refused login) is
/// permanent.
pub fn is_transient(error: &RedisError) -> bool {
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
    {
        return true;
    }
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        ) | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::MasterNameNotFoundBySentinel
    )
}

/// Whether the server refused `error`'s command before running it, because of the state of
/// the deployment: sending it again (to the right node) cannot apply it twice.
pub(crate) fn refused_before_running(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(
            ServerErrorKind::ReadOnly
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::TryAgain
        )
    )
}

/// The server error kind of a reply that is an error, if it is one.
pub(crate) fn reply_error_kind(reply: &Value) -> Option<ServerErrorKind> {
    match reply {
        Value::ServerError(error) => error.kind(),
        _ => None,
    }
}

/// Whether a reply tells that the server is not (or no longer) a writable master.
pub(crate) fn is_demotion_sign(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> RedisError {
        let value = redis::parse_redis_value(format!("-{code} some detail\r\n").as_bytes())
            .expect("a RESP error reply");
        match value {
            Value::ServerError(error) => RedisError::from(error),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn failover_states_and_lost_connections_are_transient() {
        for code in [
            "READONLY",
            "LOADING",
            "MASTERDOWN",
            "CLUSTERDOWN",
            "TRYAGAIN",
        ] {
            assert!(is_transient(&server(code)), "{code}");
        }
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(is_transient(&reset));
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(is_transient(&timeout));
    }

    #[test]
    fn script_permission_and_login_errors_are_permanent() {
        for code in ["ERR", "NOPERM", "WRONGTYPE", "NOSCRIPT", "DELAYQ_CORRUPT"] {
            assert!(!is_transient(&server(code)), "{code}");
        }
        let login = RedisError::from((ErrorKind::AuthenticationFailed, "WRONGPASS"));
        assert!(!is_transient(&login));
    }

    #[test]
    fn typed_errors_keep_the_code_and_drop_the_password() {
        let error = Error::from_redis(
            "EVALSHA",
            &server("NOPERM user hunter2 has no permissions"),
            &["hunter2".to_owned()],
        );
        let shown = error.to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!error.is_transient());
        assert!(matches!(error, Error::Command { code: Some(ref code), .. } if code == "NOPERM"));
    }
}
