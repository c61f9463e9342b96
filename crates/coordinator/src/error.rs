//! Typed errors of the coordinator.

/// What coordinator operations and configuration checks fail with.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// A configuration value that cannot work; names the key and the value.
    #[error("invalid coordinator config: {key} = {value}: {reason}")]
    InvalidConfig {
        /// The config key (`node.heartbeat_ttl`, `redis.url`, ...).
        key: &'static str,
        /// The value given (without password).
        value: String,
        /// Why it cannot work.
        reason: &'static str,
    },
    /// Redis could not be reached before the start timeout ran out.
    #[error("could not reach Redis at {target} within {waited_ms} ms: {message}")]
    Unreachable {
        /// The topology (URLs without passwords).
        target: String,
        /// How long it tried.
        waited_ms: u64,
        /// The last error.
        message: String,
    },
    /// Redis refused the login (wrong user or password). Never retried.
    #[error("Redis at {target} refused the login: {message}")]
    Authentication {
        /// The topology (URLs without passwords).
        target: String,
        /// Redis's message (never the password).
        message: String,
    },
    /// A Redis command failed.
    #[error("coordinator operation {operation} failed: {message}")]
    Backend {
        /// The operation.
        operation: &'static str,
        /// The backend's message (without passwords).
        message: String,
    },
    /// A registry entry could not be decoded.
    #[error("corrupt registry entry for node {node}: {reason}")]
    CorruptEntry {
        /// The node id.
        node: String,
        /// What is wrong.
        reason: String,
    },
}

/// `Result` with [`CoordinatorError`].
pub type CoordinatorResult<T> = Result<T, CoordinatorError>;

impl CoordinatorError {
    /// The coordinator's error for a failure of the connection layer during `operation`.
    pub(crate) fn from_redis(operation: &'static str, error: delayq_redis::Error) -> Self {
        use delayq_redis::Error;
        match error {
            Error::InvalidConfig {
                field,
                value,
                reason,
            } => CoordinatorError::InvalidConfig {
                key: field,
                value: format!("{value} ({reason})"),
                reason: "not a usable Redis setting",
            },
            Error::TlsFile {
                field,
                path,
                reason,
            } => CoordinatorError::InvalidConfig {
                key: field,
                value: format!("{} ({reason})", path.display()),
                reason: "cannot be read",
            },
            Error::Authentication { target, message } => {
                CoordinatorError::Authentication { target, message }
            }
            Error::Unreachable {
                target,
                waited_ms,
                message,
            } => CoordinatorError::Unreachable {
                target,
                waited_ms,
                message,
            },
            other => CoordinatorError::Backend {
                operation,
                message: other.to_string(),
            },
        }
    }
}
