//! The configuration error: every variant names the file, key, value and line it can.

use std::path::PathBuf;

use super::schema;

/// Why a configuration could not be loaded. Each message is one line naming the key and
/// value at fault and, when the value came from a file, its line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read configuration file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid YAML (or has a duplicate key).
    #[error("{source_name}:{line}:{column}: invalid YAML: {message}")]
    Parse {
        /// The file name (or other source) given to the parser.
        source_name: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's explanation.
        message: String,
    },
    /// A key delayq does not know (usually a typo).
    #[error(
        "{source_name}:{line}: unknown key `{key}` (known keys here: {})",
        schema::known_keys_beside(key).join(", ")
    )]
    UnknownKey {
        /// The file name (or other source).
        source_name: String,
        /// The dotted path of the key, e.g. `engine.pul_period` or
        /// `queues.order-timeout.backoff.mux`.
        key: String,
        /// 1-based line of the key.
        line: usize,
    },
    /// A key whose value has the wrong type or is out of range.
    #[error("invalid value {value:?} for `{key}`{}: {reason}", at_line(*line))]
    InvalidValue {
        /// The dotted path of the key, e.g. `node.heartbeat_ttl`.
        key: String,
        /// The value as written (passwords in URLs redacted).
        value: String,
        /// What is wrong and what is expected.
        reason: String,
        /// 1-based line of the value, when it came from a file.
        line: Option<usize>,
    },
    /// A name under `queues:` that is not a valid queue name.
    #[error("invalid queue name {name:?} under `queues`{}: {reason}", at_line(*line))]
    InvalidQueueName {
        /// The name as written.
        name: String,
        /// What is wrong with it.
        reason: String,
        /// 1-based line of the name, when it came from a file.
        line: Option<usize>,
    },
}

impl ConfigError {
    /// The line the error points at, when it came from a file.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Parse { line, .. } | ConfigError::UnknownKey { line, .. } => Some(*line),
            ConfigError::InvalidValue { line, .. } | ConfigError::InvalidQueueName { line, .. } => {
                *line
            }
        }
    }

    /// Points a value error at `line` unless it already has one.
    pub(crate) fn or_at_line(mut self, found: Option<usize>) -> Self {
        if let ConfigError::InvalidValue { line, .. } | ConfigError::InvalidQueueName { line, .. } =
            &mut self
        {
            if line.is_none() {
                *line = found;
            }
        }
        self
    }

    /// The dotted key a value error is about (`queues.<name>` for a bad queue name).
    pub(crate) fn key_path(&self) -> Option<String> {
        match self {
            ConfigError::InvalidValue { key, .. } => Some(key.clone()),
            ConfigError::InvalidQueueName { name, .. } => Some(format!("queues.{name}")),
            _ => None,
        }
    }
}

fn at_line(line: Option<usize>) -> String {
    line.map(|line| format!(" at line {line}"))
        .unwrap_or_default()
}
