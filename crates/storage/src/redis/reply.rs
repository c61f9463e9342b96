//! Reading script and command replies (RESP2 or RESP3) without panicking.

use redis::Value;

use crate::error::{StorageError, StorageResult};
use crate::model::TaskId;
use crate::TraceParent;

use super::error_map::unexpected_reply;

/// The bytes of a string reply.
pub(crate) fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.into_bytes()),
        Value::Okay => Some(b"OK".to_vec()),
        _ => None,
    }
}

/// A string reply as text.
pub(crate) fn text(value: Value) -> Option<String> {
    bytes(value).and_then(|bytes| String::from_utf8(bytes).ok())
}

/// A non-negative integer reply: an integer, a decimal string or a score (`"1.7e+12"`, a
/// RESP3 double).
pub(crate) fn number(value: &Value) -> Option<u64> {
    let from_float = |float: f64| {
        (float.is_finite() && float >= 0.0 && float <= u64::MAX as f64).then_some(float as u64)
    };
    match value {
        Value::Int(int) => u64::try_from(*int).ok(),
        Value::Double(float) => from_float(*float),
        Value::BulkString(bytes) => {
            let text = std::str::from_utf8(bytes).ok()?;
            text.parse::<u64>()
                .ok()
                .or_else(|| text.parse::<f64>().ok().and_then(from_float))
        }
        Value::SimpleString(text) => text.parse().ok(),
        _ => None,
    }
}

/// The elements of an array reply.
pub(crate) fn array(value: Value) -> Option<Vec<Value>> {
    match value {
        Value::Array(items) | Value::Set(items) => Some(items),
        Value::Nil => Some(Vec::new()),
        _ => None,
    }
}

/// The elements of an array reply, or an `unexpected reply` error.
pub(crate) fn expect_array(operation: &'static str, value: Value) -> StorageResult<Vec<Value>> {
    match array(value) {
        Some(items) => Ok(items),
        None => Err(unexpected_reply(operation, "expected an array")),
    }
}

/// A number, or an `unexpected reply` error naming what it should have been.
pub(crate) fn expect_number(
    operation: &'static str,
    value: &Value,
    what: &str,
) -> StorageResult<u64> {
    number(value).ok_or_else(|| unexpected_reply(operation, format!("{what} is {value:?}")))
}

/// The `(member, score)` pairs of a `WITHSCORES` reply: flat in RESP2, nested pairs in RESP3.
pub(crate) fn scored_pairs(values: Vec<Value>) -> Vec<(Value, Value)> {
    let mut pairs = Vec::with_capacity(values.len() / 2);
    let mut values = values.into_iter();
    while let Some(value) = values.next() {
        match value {
            Value::Array(pair) if pair.len() == 2 => {
                let mut pair = pair.into_iter();
                if let (Some(member), Some(score)) = (pair.next(), pair.next()) {
                    pairs.push((member, score));
                }
            }
            member => {
                if let Some(score) = values.next() {
                    pairs.push((member, score));
                }
            }
        }
    }
    pairs
}

/// A task id read back from Redis (a member of `key`); an invalid one is a corrupt entry.
pub(crate) fn task_id(key: &str, value: Value) -> StorageResult<TaskId> {
    let raw = bytes(value).unwrap_or_default();
    let lossy = String::from_utf8_lossy(&raw).into_owned();
    let text = String::from_utf8(raw).map_err(|_| StorageError::CorruptRecord {
        key: key.to_owned(),
        field: lossy.clone(),
        reason: "the member is not UTF-8".to_owned(),
    })?;
    TaskId::new(&text).map_err(|error| StorageError::CorruptRecord {
        key: key.to_owned(),
        field: lossy,
        reason: error.to_string(),
    })
}

/// A traceparent read from the `traces` hash: nil (none) is `None`, and so is one that does
/// not parse (written by outside tooling), which is logged: the task goes on without it.
pub(crate) fn stored_traceparent(traces_key: &str, value: Value) -> Option<TraceParent> {
    let text = text(value)?;
    match TraceParent::parse(&text) {
        Ok(trace) => Some(trace),
        Err(error) => {
            tracing::warn!(key = traces_key, %error, "a stored traceparent could not be read; the task goes on without it");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_come_in_many_shapes() {
        assert_eq!(number(&Value::Int(7)), Some(7));
        assert_eq!(number(&Value::Int(-1)), None);
        assert_eq!(
            number(&Value::BulkString(b"1700000000000".to_vec())),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            number(&Value::BulkString(b"1.7e+12".to_vec())),
            Some(1_700_000_000_000)
        );
        assert_eq!(number(&Value::Double(5.0)), Some(5));
        assert_eq!(number(&Value::BulkString(b"x".to_vec())), None);
        assert_eq!(number(&Value::Nil), None);
    }

    #[test]
    fn scored_pairs_read_resp2_and_resp3_shapes() {
        let member = |name: &str| Value::BulkString(name.as_bytes().to_vec());
        let flat = vec![member("a"), member("1"), member("b"), member("2")];
        let nested = vec![
            Value::Array(vec![member("a"), Value::Double(1.0)]),
            Value::Array(vec![member("b"), Value::Double(2.0)]),
        ];
        for values in [flat, nested] {
            let pairs = scored_pairs(values);
            let scores: Vec<_> = pairs.iter().map(|(_, score)| number(score)).collect();
            assert_eq!(scores, [Some(1), Some(2)]);
        }
    }

    #[test]
    fn an_invalid_member_is_a_corrupt_entry() {
        let error = task_id("k", Value::BulkString(Vec::new())).expect_err("empty id");
        assert!(
            matches!(error, StorageError::CorruptRecord { .. }),
            "{error}"
        );
    }
}
