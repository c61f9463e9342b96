//! Typed errors of the coordinator.

/// What coordinator operations and configuration checks fail with.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// A configuration value that cannot work; names the key and the value.
    #[error("invalid coordinator config: {key} = {value}: {reason}")]
    InvalidConfig {
        /// The config key (`node.heartbeat_ttl`, ...).
        key: &'static str,
        /// The value given.
        value: String,
        /// Why it cannot work.
        reason: &'static str,
    },
    /// Redis could not be reached before the start timeout ran out.
    #[error("could not reach Redis at {url} within {waited_ms} ms: {message}")]
    Unreachable {
        /// The URL (without password).
        url: String,
        /// How long it tried.
        waited_ms: u64,
        /// The last error.
        message: String,
    },
    /// A Redis command failed.
    #[error("coordinator operation {operation} failed: {message}")]
    Backend {
        /// The operation.
        operation: &'static str,
        /// The backend's message.
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
