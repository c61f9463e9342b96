//! The task record stored in a partition's `tasks` hash, format version 1.
//!
//! ```text
//! 1|<generation>|<attempt>|<claim>|<due>|<scheduled due>|<error length>|<error><payload>
//! ```
//!
//! Numbers are decimal ASCII, so the Lua scripts read and rewrite the header with one
//! `string.match` and the payload stays opaque bytes after it. An empty field takes its
//! default: attempt 1, claim 0, error length 0, scheduled due = due, and due = the task's
//! score in the `due` set (only while it is pending; `claim_due` writes it into the record).
//! `<due>` is the due time of the current (or last) attempt; `<scheduled due>` is the due the
//! producer gave (the dedup key); `<claim>` is the fencing number of the latest claim.
//!
//! Why so terse: a fresh pending task's header is `1|<16-digit generation>||||||`, 24 bytes,
//! so with a 50-byte payload the value fits jemalloc's 80-byte size class (76 usable bytes);
//! writing the defaults out would push it into the 96-byte class, 16 bytes more per task.
//!
//! The first field is the version. A record with another version, or none, is refused with a
//! reason (the caller turns it into `CorruptRecord` naming key and field), never guessed at;
//! a later release bumps the version and keeps a decoder for version 1. The Lua twin of this
//! codec is `lua/record.lua`: change both together.

use bytes::Bytes;

/// The record format this release writes and reads.
pub(crate) const RECORD_VERSION: u64 = 1;

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Bumped each time the id is scheduled; never reused for an id.
    pub generation: u64,
    /// The attempt of the current (or last) delivery.
    pub attempt: u32,
    /// The fencing number of the latest claim (0 before the first).
    pub claim: u64,
    /// The due time of the current (or last) attempt; `None`: the task's score in `due`.
    pub due_ms: Option<u64>,
    /// The due time the producer scheduled, the dedup key; `None`: the same as the due.
    pub scheduled_due_ms: Option<u64>,
    /// The last handler error (empty: none).
    pub last_error: String,
    /// The payload (empty for a completed task).
    pub payload: Bytes,
}

impl Record {
    /// Decodes a raw record. The error is a reason for `CorruptRecord`.
    pub(crate) fn decode(raw: Vec<u8>) -> Result<Record, String> {
        let mut cursor = Cursor { raw: &raw, at: 0 };
        let version = cursor
            .number("version")
            .map_err(|_| "not a delayq record (no version header)".to_owned())?;
        if version != RECORD_VERSION {
            return Err(format!(
                "unknown record version {version} (this release reads version {RECORD_VERSION})"
            ));
        }
        let generation = cursor.number("generation")?;
        let attempt = cursor.optional_number("attempt")?.unwrap_or(1);
        let attempt = u32::try_from(attempt).map_err(|_| format!("attempt {attempt} overflows"))?;
        let claim = cursor.optional_number("claim")?.unwrap_or(0);
        let due_ms = cursor.optional_number("due")?;
        let scheduled_due_ms = cursor.optional_number("scheduled due")?;
        let error_len = cursor.optional_number("error length")?.unwrap_or(0);
        let error_start = cursor.at;
        let error_end = usize::try_from(error_len)
            .ok()
            .and_then(|len| error_start.checked_add(len))
            .filter(|end| *end <= raw.len())
            .ok_or_else(|| format!("error length {error_len} runs past the end of the record"))?;
        let last_error = std::str::from_utf8(&raw[error_start..error_end])
            .map_err(|_| "the last error is not UTF-8".to_owned())?
            .to_owned();
        let payload = Bytes::from(raw).slice(error_end..);
        Ok(Record {
            generation,
            attempt,
            claim,
            due_ms,
            scheduled_due_ms,
            last_error,
            payload,
        })
    }

    /// Encodes the record as the scripts write it (tests plant records with it; in production
    /// only the scripts write records).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        let optional =
            |value: Option<u64>| value.map(|value| value.to_string()).unwrap_or_default();
        let unless = |value: u64, default: u64| optional((value != default).then_some(value));
        let scheduled = optional(
            self.scheduled_due_ms
                .filter(|due| Some(*due) != self.due_ms),
        );
        let mut out = format!(
            "{RECORD_VERSION}|{}|{}|{}|{}|{scheduled}|{}|{}",
            self.generation,
            unless(u64::from(self.attempt), 1),
            unless(self.claim, 0),
            optional(self.due_ms),
            unless(self.last_error.len() as u64, 0),
            self.last_error
        )
        .into_bytes();
        out.extend_from_slice(&self.payload);
        out
    }

    /// The due of the current (or last) attempt, which every record outside `due` carries.
    pub(crate) fn explicit_due(&self) -> Result<u64, String> {
        self.due_ms
            .ok_or_else(|| "the record of a task that is not pending has no due".to_owned())
    }

    /// The last error, if any.
    pub(crate) fn last_error(&self) -> Option<String> {
        (!self.last_error.is_empty()).then(|| self.last_error.clone())
    }
}

/// Reads `|`-terminated decimal fields from the front of a record.
struct Cursor<'a> {
    raw: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn optional_number(&mut self, field: &str) -> Result<Option<u64>, String> {
        let rest = &self.raw[self.at..];
        let end = rest
            .iter()
            .position(|byte| *byte == b'|')
            .ok_or_else(|| format!("the header ends before the {field} field"))?;
        let digits = &rest[..end];
        self.at += end + 1;
        if digits.is_empty() {
            return Ok(None);
        }
        if digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
            return Err(format!(
                "the {field} field {:?} is not a number",
                String::from_utf8_lossy(digits)
            ));
        }
        std::str::from_utf8(digits)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("the {field} field overflows"))
    }

    fn number(&mut self, field: &str) -> Result<u64, String> {
        self.optional_number(field)?
            .ok_or_else(|| format!("the {field} field is empty"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            generation: 3,
            attempt: 2,
            claim: 1_700_000_000_123_456,
            due_ms: Some(1_700_000_005_000),
            scheduled_due_ms: Some(1_700_000_000_000),
            last_error: "boom | with pipes".to_owned(),
            payload: Bytes::from_static(b"pay|load\x00\xff"),
        }
    }

    #[test]
    fn round_trips_every_field() {
        let record = sample();
        assert_eq!(Record::decode(record.encode()), Ok(record));
    }

    #[test]
    fn a_fresh_pending_record_is_compact() {
        let record = Record {
            generation: 1_764_500_000_123_456,
            attempt: 1,
            claim: 0,
            due_ms: None,
            scheduled_due_ms: None,
            last_error: String::new(),
            payload: Bytes::from_static(b"p"),
        };
        let raw = record.encode();
        assert_eq!(raw, b"1|1764500000123456||||||p");
        assert!(raw.len() - 1 <= 26, "50-byte payloads must fit 76 bytes");
        assert_eq!(Record::decode(raw), Ok(record));
    }

    #[test]
    fn an_implicit_due_is_an_error_where_one_is_needed() {
        let record = Record::decode(b"1|5||||||".to_vec()).expect("decodes");
        assert!(record.explicit_due().is_err());
        assert_eq!((record.attempt, record.claim), (1, 0));
    }

    #[test]
    fn empty_payload_and_no_error() {
        let record = Record {
            last_error: String::new(),
            payload: Bytes::new(),
            ..sample()
        };
        let decoded = Record::decode(record.encode()).expect("decodes");
        assert_eq!(decoded.last_error(), None);
        assert!(decoded.payload.is_empty());
    }

    #[test]
    fn an_unknown_version_is_refused_by_name() {
        let reason = Record::decode(b"2|1|1|0|5||0|x".to_vec()).expect_err("version 2");
        assert!(reason.contains("unknown record version 2"), "{reason}");
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        for raw in [
            &b""[..],
            b"hello",
            b"|1|1|0|5||0|",
            b"1|1|1|0|5||0",
            b"1|||||||",
            b"1|x|1|0|5||0|",
            b"1|1|1|0|5||9|short",
            b"1|1|99999999999|0|5||0|",
            b"1|1|1|0|99999999999999999999999|0|",
            b"1|1|1|0|5||2|\xff\xfe",
        ] {
            let reason = Record::decode(raw.to_vec()).expect_err("corrupt");
            assert!(!reason.is_empty(), "{raw:?}");
        }
    }

    /// The Lua half of the codec (lua/record.lua) against this one, on a real Redis.
    #[test]
    fn lua_and_rust_read_each_others_records() {
        let server = delayq_testkit::RedisServer::start();
        let mut connection = server.client().get_connection().expect("connect");
        let decode_in_lua = redis::Script::new(&format!(
            "{}\nlocal rec, reason = decode_record(ARGV[1])\n\
             if not rec then return redis.error_reply('DECODE ' .. reason) end\n\
             return {{tostring(rec.gen), tostring(rec.attempt), string.format('%d', rec.claim), \
             rec.due, rec.sched, rec.err, string.sub(ARGV[1], rec.payload_at)}}",
            crate::redis::scripts::RECORD
        ));
        let record = sample();
        let fields: Vec<Vec<u8>> = decode_in_lua
            .arg(record.encode())
            .invoke(&mut connection)
            .expect("Lua decodes a Rust record");
        let text = |index: usize| String::from_utf8_lossy(&fields[index]).into_owned();
        assert_eq!(text(0), record.generation.to_string());
        assert_eq!(text(1), record.attempt.to_string());
        assert_eq!(text(2), record.claim.to_string());
        assert_eq!(Some(text(3)), record.due_ms.map(|due| due.to_string()));
        assert_eq!(
            Some(text(4)),
            record.scheduled_due_ms.map(|due| due.to_string())
        );
        assert_eq!(text(5), record.last_error);
        assert_eq!(fields[6], record.payload.to_vec());

        let refused: redis::RedisResult<Vec<Vec<u8>>> =
            decode_in_lua.arg("2|1|1|0|5||0|x").invoke(&mut connection);
        let refusal = refused.expect_err("version 2").to_string();
        assert!(refusal.contains("unknown record version 2"), "{refusal}");

        let encode_in_lua = redis::Script::new(&format!(
            "{}\nreturn encode_record(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), \
             ARGV[4], ARGV[5], ARGV[6], ARGV[7])",
            crate::redis::scripts::RECORD
        ));
        let raw: Vec<u8> = encode_in_lua
            .arg(record.generation)
            .arg(record.attempt)
            .arg(record.claim)
            .arg(record.due_ms.map(|due| due.to_string()).unwrap_or_default())
            .arg(
                record
                    .scheduled_due_ms
                    .map(|due| due.to_string())
                    .unwrap_or_default(),
            )
            .arg(&record.last_error)
            .arg(record.payload.as_ref())
            .invoke(&mut connection)
            .expect("Lua encodes");
        assert_eq!(raw, record.encode(), "both halves write the same bytes");
        assert_eq!(Record::decode(raw), Ok(record));
    }
}
