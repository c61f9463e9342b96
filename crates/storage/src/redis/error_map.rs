//! From redis-rs errors (and the scripts' own error replies) to [`StorageError`].
//!
//! - an I/O timeout (the response timeout) is `Timeout`;
//! - any other I/O failure (refused, reset, broken pipe, EOF, the connection manager still
//!   reconnecting) is `ConnectionLost`; so are the transient server states `LOADING` (a
//!   restarted Redis replaying its AOF), `MASTERDOWN`, `CLUSTERDOWN` and `TRYAGAIN`, which
//!   say "not now" rather than "no";
//! - `DELAYQ_CORRUPT <reason> | field <id>` from a script is `CorruptRecord` on the partition's
//!   `tasks` key; `DELAYQ_STALE` is `StaleLease`;
//! - everything else (a script bug, OOM, NOPERM, wrong type) is `Backend` with Redis's message.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::StorageError;

/// The error code of a record a script could not decode.
const CORRUPT_CODE: &str = "DELAYQ_CORRUPT";
/// The error code of a lease token that no longer holds its lease.
const STALE_CODE: &str = "DELAYQ_STALE";
/// Separates the reason from the field in a `DELAYQ_CORRUPT` message.
const FIELD_MARK: &str = " | field ";

/// Maps a redis-rs error of `operation`. `tasks_key` names the hash a corrupt record was
/// found in.
pub(crate) fn map_error(
    operation: &'static str,
    tasks_key: &str,
    error: RedisError,
) -> StorageError {
    if let Some(corrupt) = corrupt_record(tasks_key, error.code(), error.detail()) {
        return corrupt;
    }
    classify(operation, &error)
}

/// The `CorruptRecord` carried by a script error reply, if it is one.
pub(crate) fn corrupt_record(
    tasks_key: &str,
    code: Option<&str>,
    detail: Option<&str>,
) -> Option<StorageError> {
    if code != Some(CORRUPT_CODE) {
        return None;
    }
    let detail = detail.unwrap_or_default();
    let (reason, field) = detail.split_once(FIELD_MARK).unwrap_or((detail, ""));
    Some(StorageError::CorruptRecord {
        key: tasks_key.to_owned(),
        field: field.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Whether a script refused a lease token.
pub(crate) fn is_stale(error: &RedisError) -> bool {
    error.code() == Some(STALE_CODE)
}

/// Whether the server did not know the script's SHA.
pub(crate) fn is_noscript(code: &str) -> bool {
    code == "NOSCRIPT"
}

fn classify(operation: &'static str, error: &RedisError) -> StorageError {
    let message = error.to_string();
    if error.is_timeout() {
        return StorageError::Timeout { operation, message };
    }
    let transient_server = matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::TryAgain
        )
    );
    if error.is_io_error() || error.is_connection_dropped() || transient_server {
        return StorageError::ConnectionLost { operation, message };
    }
    StorageError::Backend { operation, message }
}

/// A reply of an unexpected shape: a bug or a foreign script under our SHA.
pub(crate) fn unexpected_reply(
    operation: &'static str,
    what: impl std::fmt::Display,
) -> StorageError {
    StorageError::Backend {
        operation,
        message: format!("unexpected reply: {what}"),
    }
}

/// `url` with its password replaced by `***`, fit for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = url[authority_start..]
        .find('/')
        .map_or(url.len(), |end| authority_start + end);
    let Some(at) = url[authority_start..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &url[authority_start..authority_start + at];
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    let shown_userinfo = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        user.to_owned()
    };
    format!(
        "{}{shown_userinfo}{}",
        &url[..authority_start],
        &url[authority_start + at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact_url("redis://user:secret@host:6380/0"),
            "redis://user:***@host:6380/0"
        );
        assert_eq!(
            redact_url("rediss://:secret@host/1"),
            "rediss://:***@host/1"
        );
        assert_eq!(redact_url("redis://user@host"), "redis://user@host");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn corrupt_replies_name_key_and_field() {
        let error = corrupt_record(
            "delayq:{q:0}:tasks",
            Some(CORRUPT_CODE),
            Some("unknown record version 9 (this release reads version 1) | field a | b"),
        );
        match error {
            Some(StorageError::CorruptRecord { key, field, reason }) => {
                assert_eq!(key, "delayq:{q:0}:tasks");
                assert_eq!(field, "a | b");
                assert!(reason.starts_with("unknown record version 9"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(corrupt_record("k", Some("ERR"), Some("x")).is_none());
    }

    #[test]
    fn io_errors_are_connection_lost_and_timeouts_are_timeouts() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(
            classify("get", &refused),
            StorageError::ConnectionLost {
                operation: "get",
                ..
            }
        ));
        let timed_out = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(matches!(
            classify("get", &timed_out),
            StorageError::Timeout { .. }
        ));
        let other = RedisError::from((ErrorKind::Client, "bad"));
        assert!(matches!(
            classify("get", &other),
            StorageError::Backend { .. }
        ));
    }
}
