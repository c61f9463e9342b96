//! Error classes: which failures mean "not now" ([`ErrorClass::Transient`]: retry, the
//! database is restarting, failing over, or was too busy) and which mean "no"
//! ([`ErrorClass::Permanent`]), and the typed [`Error`] of this crate.
//!
//! No message of this crate carries a password: URLs are shown through
//! [`crate::redact_url`] and the driver's and server's messages are scrubbed of the
//! configured password.

use std::error::Error as _;
use std::path::PathBuf;

use tokio_postgres::error::SqlState;

/// Whether trying again may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The connection was lost or refused, the server is shutting down, restarting or in
    /// recovery, a standby was reached after a failover (`25006`), the statement ran into
    /// `statement_timeout` (`57014`), the transaction lost a serialization conflict (`40001`)
    /// or a deadlock (`40P01`), the server is out of connections (`53300`), or the pool waited
    /// too long. Trying again (on a new connection) may succeed; a statement that was in
    /// flight when its connection dropped may or may not have been applied.
    Transient,
    /// A bad statement, a constraint violation, a refused login, a certificate that does not
    /// verify, a bad setting: the same call fails the same way.
    Permanent,
}

/// A failure of the PostgreSQL layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting cannot be used.
    #[error("invalid PostgreSQL setting {field} = {value}: {reason}")]
    InvalidConfig {
        /// The setting, e.g. `postgres.url` or `postgres.schema`.
        field: &'static str,
        /// Its value, with any password removed.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A TLS file (`sslrootcert`, `sslcert`, `sslkey`) could not be read or used.
    #[error("cannot use {field} file {}: {reason}", path.display())]
    TlsFile {
        /// `sslrootcert`, `sslcert` or `sslkey`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The database refused or failed an operation, or could not be reached.
    #[error("PostgreSQL {operation} failed ({}{}): {message}",
        if *class == ErrorClass::Transient { "transient" } else { "permanent" },
        code.as_deref().map(|code| format!(", SQLSTATE {code}")).unwrap_or_default())]
    Database {
        /// What was being done, e.g. `connect`, `claim_due` or `migrate`.
        operation: &'static str,
        /// Whether trying again may succeed.
        class: ErrorClass,
        /// The five-character SQLSTATE the server sent, if the server sent one.
        code: Option<String>,
        /// The message, scrubbed of passwords.
        message: String,
    },
    /// A migration failed; the transaction it ran in was rolled back, so nothing of it remains.
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        /// Its version.
        version: u32,
        /// Its name.
        name: &'static str,
        /// Why.
        source: Box<Error>,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether trying again may succeed.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Database { class, .. } => *class,
            Error::Migration { source, .. } => source.class(),
            Error::InvalidConfig { .. } | Error::TlsFile { .. } => ErrorClass::Permanent,
        }
    }

    /// `class() == Transient`.
    pub fn is_transient(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// The SQLSTATE the server sent (`23505` for a unique violation, ...), if it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Database { code, .. } => code.as_deref(),
            Error::Migration { source, .. } => source.code(),
            Error::InvalidConfig { .. } | Error::TlsFile { .. } => None,
        }
    }

    /// The same error, saying that what it interrupted may have been applied.
    pub(crate) fn with_unknown_outcome(self) -> Self {
        match self {
            Error::Database {
                operation,
                class,
                code,
                message,
            } => Error::Database {
                operation,
                class,
                code,
                message: format!(
                    "{message} (the connection was lost during COMMIT: it may have been applied)"
                ),
            },
            other => other,
        }
    }

    /// A bad setting.
    pub(crate) fn invalid(field: &'static str, value: &str, reason: &str) -> Self {
        Error::InvalidConfig {
            field,
            value: value.to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// The typed error for a driver error of `operation`, scrubbed of `secrets`.
    pub fn from_driver(
        operation: &'static str,
        error: &tokio_postgres::Error,
        secrets: &[String],
    ) -> Self {
        let code = error.code().map(|code| code.code().to_owned());
        let message = match error.as_db_error() {
            // The driver's Display of a server error is only "db error"; show the server's.
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => chain(error),
        };
        Error::Database {
            operation,
            class: classify(error),
            code,
            message: scrub(&message, secrets),
        }
    }

    /// The typed error for a pool error of `operation`, scrubbed of `secrets`.
    pub(crate) fn from_pool(
        operation: &'static str,
        error: &deadpool_postgres::PoolError,
        secrets: &[String],
    ) -> Self {
        use deadpool_postgres::PoolError;
        match error {
            PoolError::Backend(error) => Error::from_driver(operation, error, secrets),
            PoolError::Timeout(_) => Error::Database {
                operation,
                class: ErrorClass::Transient,
                code: None,
                message: scrub(&error.to_string(), secrets),
            },
            other => Error::Database {
                operation,
                class: ErrorClass::Permanent,
                code: None,
                message: scrub(&other.to_string(), secrets),
            },
        }
    }
}

/// The class of a driver error: by SQLSTATE when the server sent one, else by what failed
/// (a lost, refused or timed-out connection is transient; a failed TLS verification or a
/// bad parameter is not).
pub fn classify(error: &tokio_postgres::Error) -> ErrorClass {
    if let Some(code) = error.code() {
        return classify_sqlstate(code);
    }
    if error.is_closed() {
        return ErrorClass::Transient;
    }
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            // rustls reports a certificate it rejects as an I/O error wrapping its own.
            let rejected_by_tls = io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
            return if rejected_by_tls {
                ErrorClass::Permanent
            } else {
                ErrorClass::Transient
            };
        }
        source = cause.source();
    }
    // The driver's kinds are private; its messages name them. A timeout waiting for the
    // server, or a connect that found no usable host (every host down, or all standbys), is
    // worth another try.
    let shown = error.to_string();
    if shown.starts_with("timeout") || shown.starts_with("error connecting to server") {
        ErrorClass::Transient
    } else {
        ErrorClass::Permanent
    }
}

/// The class of a SQLSTATE.
pub fn classify_sqlstate(code: &SqlState) -> ErrorClass {
    let transient = [
        SqlState::ADMIN_SHUTDOWN,            // 57P01
        SqlState::CRASH_SHUTDOWN,            // 57P02
        SqlState::CANNOT_CONNECT_NOW,        // 57P03: starting up, in recovery
        SqlState::QUERY_CANCELED,            // 57014: statement_timeout
        SqlState::T_R_SERIALIZATION_FAILURE, // 40001
        SqlState::T_R_DEADLOCK_DETECTED,     // 40P01
        SqlState::READ_ONLY_SQL_TRANSACTION, // 25006: a standby after a failover
        SqlState::TOO_MANY_CONNECTIONS,      // 53300
        SqlState::LOCK_NOT_AVAILABLE,        // 55P03: lock_timeout
        SqlState::IDLE_SESSION_TIMEOUT,      // 57P05
    ];
    let class = code.code().get(..2);
    // Class 08: connection exceptions.
    if transient.contains(code) || class == Some("08") {
        ErrorClass::Transient
    } else {
        ErrorClass::Permanent
    }
}

/// `error` and its causes, joined by ": ".
fn chain(error: &dyn std::error::Error) -> String {
    let mut shown = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !shown.contains(&next) {
            shown.push_str(": ");
            shown.push_str(&next);
        }
        source = cause.source();
    }
    shown
}

/// `message` with every one of `secrets` replaced by `***`.
pub(crate) fn scrub(message: &str, secrets: &[String]) -> String {
    let mut scrubbed = message.to_owned();
    for secret in secrets.iter().filter(|secret| secret.len() >= 2) {
        scrubbed = scrubbed.replace(secret.as_str(), "***");
    }
    scrubbed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_timeouts_conflicts_and_standbys_are_transient() {
        for code in [
            "57P01", "57P02", "57P03", "57014", "40001", "40P01", "25006", "08006",
        ] {
            assert_eq!(
                classify_sqlstate(&SqlState::from_code(code)),
                ErrorClass::Transient,
                "{code}"
            );
        }
    }

    #[test]
    fn bad_statements_and_violations_are_permanent() {
        for code in ["42601", "42P01", "23505", "28P01", "22P02", "42501"] {
            assert_eq!(
                classify_sqlstate(&SqlState::from_code(code)),
                ErrorClass::Permanent,
                "{code}"
            );
        }
    }

    #[test]
    fn messages_are_scrubbed_and_show_the_class_and_code() {
        let error = Error::Database {
            operation: "connect",
            class: ErrorClass::Transient,
            code: Some("57P01".to_owned()),
            message: scrub("login hunter2 failed", &["hunter2".to_owned()]),
        };
        let shown = error.to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("transient") && shown.contains("57P01"),
            "{shown}"
        );
        assert_eq!(error.code(), Some("57P01"));
    }
}
