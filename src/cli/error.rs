//! What a command fails with, and the exit code each failure maps to.

use delayq_coordinator::CoordinatorError;
use delayq_engine::EngineError;
use delayq_storage::StorageError;

/// A failed command: a usage error (exit 2), a runtime error (exit 1) or an interruption
/// (exit 130). The message is one
/// line naming the cause and the value; `main` prints it as `error: <message>`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad flag, value or configuration: the user must change the command.
    #[error("{0}")]
    Usage(String),
    /// Something failed while running: Redis unreachable, task not found, handler setup, ...
    #[error("{0}")]
    Runtime(String),
    /// A second signal (or one during start) ended the command at once: exit 130, like a
    /// shell after Ctrl-C.
    #[error("{0}")]
    Interrupted(String),
}

/// `Result` with [`CliError`].
pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    /// The process exit code: 2 for usage errors, 1 for runtime errors, 130 when interrupted.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Runtime(_) => 1,
            CliError::Interrupted(_) => 130,
        }
    }

    /// The message on one line (nested error texts may carry line breaks), with the
    /// password of any URL in it masked: whatever layer the text comes from, a Redis
    /// password never reaches the terminal.
    pub fn one_line(&self) -> String {
        let (CliError::Usage(message)
        | CliError::Runtime(message)
        | CliError::Interrupted(message)) = self;
        let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
        delayq_http::redact_urls(&line)
    }

    /// The same error with `context` in front of its message.
    pub fn with_context(self, context: &str) -> Self {
        match self {
            CliError::Usage(message) => CliError::Usage(format!("{context}: {message}")),
            CliError::Runtime(message) => CliError::Runtime(format!("{context}: {message}")),
            CliError::Interrupted(message) => {
                CliError::Interrupted(format!("{context}: {message}"))
            }
        }
    }

    /// A runtime error from the boxed errors `demo` and `bench` return.
    pub fn from_boxed(error: Box<dyn std::error::Error + Send + Sync>) -> Self {
        // Engine, config and storage errors keep their usage/runtime distinction (a bad
        // `--redis` URL of the demo is a usage error, exit 2).
        let error = match error.downcast::<EngineError>() {
            Ok(engine) => return (*engine).into(),
            Err(other) => other,
        };
        let error = match error.downcast::<StorageError>() {
            Ok(storage) => return (*storage).into(),
            Err(other) => other,
        };
        let error = match error.downcast::<delayq_postgres::Error>() {
            Ok(postgres) => return (*postgres).into(),
            Err(other) => other,
        };
        match error.downcast::<delayq::config::ConfigError>() {
            Ok(config) => CliError::Usage(config.to_string()),
            Err(other) => CliError::Runtime(other.to_string()),
        }
    }
}

impl From<EngineError> for CliError {
    fn from(error: EngineError) -> Self {
        let usage = match &error {
            EngineError::Config(_)
            | EngineError::InvalidWhen { .. }
            | EngineError::InvalidSpec(_)
            | EngineError::InvalidLimit { .. }
            | EngineError::DuplicateHandler { .. } => true,
            EngineError::Storage(storage) => is_input_error(storage),
            EngineError::Coordinator(CoordinatorError::InvalidConfig { .. }) => true,
            EngineError::Postgres(
                delayq_postgres::Error::InvalidConfig { .. }
                | delayq_postgres::Error::TlsFile { .. },
            ) => true,
            // `queue delete` of a queue holding tasks: refused at run time (exit 1), naming
            // the counts.
            EngineError::QueueNotEmpty { .. } => false,
            _ => false,
        };
        if usage {
            CliError::Usage(error.to_string())
        } else {
            CliError::Runtime(error.to_string())
        }
    }
}

impl From<StorageError> for CliError {
    fn from(error: StorageError) -> Self {
        EngineError::from(error).into()
    }
}

impl From<delayq_postgres::Error> for CliError {
    fn from(error: delayq_postgres::Error) -> Self {
        EngineError::from(error).into()
    }
}

impl From<CoordinatorError> for CliError {
    fn from(error: CoordinatorError) -> Self {
        EngineError::from(error).into()
    }
}

/// Whether the store rejected the input itself (rather than failing to store it).
fn is_input_error(error: &StorageError) -> bool {
    matches!(
        error,
        StorageError::InvalidQueueName { .. }
            | StorageError::InvalidTaskId { .. }
            | StorageError::InvalidTraceParent { .. }
            | StorageError::InvalidDue { .. }
            | StorageError::PayloadTooLarge { .. }
            | StorageError::InvalidPartitionCount { .. }
    )
}

/// Clap's error as one line: its message and any `tip:`, without the usage block (which
/// `--help` shows). Starts with `error: `.
pub fn clap_error_line(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line);
        }
    }
    let mut message = parts.join(" ");
    if !message.starts_with("error:") {
        message = format!("error: {message}");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_lines_and_masks_url_passwords() {
        let error = CliError::Runtime(
            "cannot reach\n  redis://app:s3cret@10.0.0.1:6379/0 (refused)".to_owned(),
        );
        assert_eq!(
            error.one_line(),
            "cannot reach redis://app:***@10.0.0.1:6379/0 (refused)"
        );
    }
}
