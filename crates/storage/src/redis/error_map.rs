//! From the connection layer's errors (and the scripts' own error replies) to
//! [`StorageError`].
//!
//! - a transient failure (`delayq_redis::is_transient`: a lost or refused connection,
//!   `READONLY`, `LOADING`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, a redirection, no master
//!   known yet) is `ConnectionLost`, or `Timeout` when nothing answered in time;
//! - too few replicas confirming a write is `ReplicationTimeout`;
//! - `DELAYQ_CORRUPT <reason> | field <id>` from a script is `CorruptRecord` on the partition's
//!   `tasks` key; `DELAYQ_STALE` is `StaleLease` (see `lease.rs`);
//! - everything else (a script bug, OOM, `NOPERM`, a refused login, a bad setting) is
//!   `Backend` with the layer's message, which never carries a password.

use delayq_redis::Error;

use crate::error::StorageError;

/// The error code of a record a script could not decode.
const CORRUPT_CODE: &str = "DELAYQ_CORRUPT";
/// The error code of a lease token that no longer holds its lease.
const STALE_CODE: &str = "DELAYQ_STALE";
/// Separates the reason from the field in a `DELAYQ_CORRUPT` message.
const FIELD_MARK: &str = " | field ";

/// Maps a connection-layer error of `operation`. `tasks_key` names the hash a corrupt record
/// was found in.
pub(crate) fn map_error(operation: &'static str, tasks_key: &str, error: Error) -> StorageError {
    match error {
        Error::Command {
            code: Some(code),
            message,
            ..
        } if code == CORRUPT_CODE => corrupt_record(tasks_key, server_detail(&code, &message)),
        Error::Command {
            transient: true,
            message,
            ..
        } => transient(operation, message),
        Error::Unreachable { .. } => transient(operation, error.to_string()),
        Error::ReplicasNotConfirmed {
            wanted, confirmed, ..
        } => StorageError::ReplicationTimeout {
            operation,
            wanted,
            confirmed,
        },
        other => StorageError::Backend {
            operation,
            message: other.to_string(),
        },
    }
}

/// `ConnectionLost`, or `Timeout` when the message says nothing answered in time (redis-rs
/// reports its response and connection timeouts as an I/O "timed out"; [`timed_out`] and the
/// layer's start timeout say "no answer within").
fn transient(operation: &'static str, message: String) -> StorageError {
    if message.contains("timed out") || message.contains("no answer within") {
        StorageError::Timeout { operation, message }
    } else {
        StorageError::ConnectionLost { operation, message }
    }
}

/// The transient error of a call that got no answer within `limit`.
pub(crate) fn timed_out(operation: &'static str, limit: std::time::Duration) -> Error {
    Error::Command {
        operation,
        transient: true,
        code: None,
        message: format!("no answer within {limit:?}"),
    }
}

/// The `CorruptRecord` carried by a script's `DELAYQ_CORRUPT` reply detail.
fn corrupt_record(tasks_key: &str, detail: &str) -> StorageError {
    let (reason, field) = detail.split_once(FIELD_MARK).unwrap_or((detail, ""));
    StorageError::CorruptRecord {
        key: tasks_key.to_owned(),
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

/// What a script wrote after its error code: redis-rs shows a server error as
/// `"CODE": detail` (the code quoted when Redis does not know it).
fn server_detail<'a>(code: &str, message: &'a str) -> &'a str {
    let quoted = format!("\"{code}\"");
    [quoted.as_str(), code]
        .iter()
        .find_map(|shown| message.strip_prefix(shown))
        .map(|rest| rest.trim_start_matches(':').trim_start())
        .unwrap_or(message)
}

/// Whether a script refused a lease token.
pub(crate) fn is_stale(error: &Error) -> bool {
    matches!(error, Error::Command { code: Some(code), .. } if code == STALE_CODE)
}

/// A copy of a connection-layer error, for each item of a failed group.
pub(crate) fn copy_error(error: &Error) -> Error {
    error.copy_for_group("redis")
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The layer's error for a server error reply `-<code> <detail>`, as it builds it.
    fn server_error(code: &str, detail: &str) -> Error {
        let value = redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes())
            .expect("a RESP error reply");
        let redis::Value::ServerError(error) = value else {
            panic!("not an error reply: {value:?}");
        };
        let error = redis::RedisError::from(error);
        Error::Command {
            operation: "EVALSHA",
            transient: delayq_redis::is_transient(&error),
            code: error.code().map(str::to_owned),
            message: error.to_string(),
        }
    }

    #[test]
    fn corrupt_replies_name_key_and_field() {
        let error = map_error(
            "get",
            "delayq:{q:0}:tasks",
            server_error(
                CORRUPT_CODE,
                "unknown record version 9 (this release reads version 1) | field a | b",
            ),
        );
        match error {
            StorageError::CorruptRecord { key, field, reason } => {
                assert_eq!(key, "delayq:{q:0}:tasks");
                assert_eq!(field, "a | b");
                assert!(reason.starts_with("unknown record version 9"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(is_stale(&server_error(
            STALE_CODE,
            "the token no longer holds"
        )));
        assert!(!is_stale(&server_error("ERR", "x")));
    }

    #[test]
    fn failover_states_are_transient_and_script_errors_are_not() {
        for code in [
            "READONLY",
            "LOADING",
            "MASTERDOWN",
            "CLUSTERDOWN",
            "TRYAGAIN",
        ] {
            let error = map_error("claim_due", "k", server_error(code, "not now"));
            assert!(
                matches!(error, StorageError::ConnectionLost { .. }),
                "{code}: {error:?}"
            );
            assert!(error.is_transient());
        }
        for code in ["ERR", "NOPERM", "WRONGTYPE", "OOM"] {
            let error = map_error("claim_due", "k", server_error(code, "no"));
            assert!(
                matches!(error, StorageError::Backend { .. }),
                "{code}: {error:?}"
            );
        }
    }

    #[test]
    fn lost_connections_timeouts_and_unconfirmed_writes_are_typed() {
        let layer = |error: redis::RedisError| Error::Command {
            operation: "EVALSHA",
            transient: delayq_redis::is_transient(&error),
            code: None,
            message: error.to_string(),
        };
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(matches!(
            map_error("get", "", layer(refused.into())),
            StorageError::ConnectionLost {
                operation: "get",
                ..
            }
        ));
        let timed_out_io = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert!(matches!(
            map_error("get", "", layer(timed_out_io.into())),
            StorageError::Timeout { .. }
        ));
        assert!(matches!(
            map_error(
                "ack",
                "",
                timed_out("ack", std::time::Duration::from_secs(1))
            ),
            StorageError::Timeout { .. }
        ));
        let unconfirmed = Error::ReplicasNotConfirmed {
            wanted: 2,
            confirmed: 1,
            timeout_ms: 100,
        };
        let error = map_error("schedule", "", copy_error(&unconfirmed));
        assert!(
            matches!(
                error,
                StorageError::ReplicationTimeout {
                    operation: "schedule",
                    wanted: 2,
                    confirmed: 1
                }
            ),
            "{error:?}"
        );
        assert!(error.is_transient());
    }
}
