//! [`TraceParent`]: the W3C trace context a schedule records, so that the fire's span can link
//! to the trace that scheduled it (DESIGN.md, "Deliveries to other systems").

use std::fmt;
use std::sync::Arc;

use crate::error::StorageError;

/// The length of a version `00` `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`.
pub const TRACEPARENT_LEN: usize = 55;

/// A W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`), validated: lowercase hex, a
/// trace id and a parent id that are not all zeros, version not `ff`. A later version's
/// value is kept as its first 55 characters, which read as version `00` (as the
/// specification says to read them).
///
/// ```
/// use delayq_storage::TraceParent;
/// let parent = TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
///     .expect("valid");
/// assert_eq!(parent.trace_id(), "0af7651916cd43dd8448eb211c80319c");
/// assert!(TraceParent::parse("00-00000000000000000000000000000000-b7ad6b7169203331-01").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceParent(Arc<str>);

impl TraceParent {
    /// Validates `value` (surrounding spaces ignored, as in an HTTP header).
    pub fn parse(value: &str) -> Result<Self, StorageError> {
        let text = value.trim();
        let invalid = |reason: &'static str| StorageError::InvalidTraceParent {
            value: shorten(text),
            reason,
        };
        let bytes = text.as_bytes();
        if bytes.len() < TRACEPARENT_LEN {
            return Err(invalid("expected 00-<32 hex>-<16 hex>-<2 hex>"));
        }
        let version = &text[..2];
        if version == "00" && bytes.len() != TRACEPARENT_LEN {
            return Err(invalid("a version 00 traceparent is 55 characters"));
        }
        if bytes.len() > TRACEPARENT_LEN && bytes[TRACEPARENT_LEN] != b'-' {
            return Err(invalid("expected 00-<32 hex>-<16 hex>-<2 hex>"));
        }
        let head = &bytes[..TRACEPARENT_LEN];
        let lower_hex = |range: std::ops::Range<usize>| {
            head[range]
                .iter()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        };
        if head[2] != b'-' || head[35] != b'-' || head[52] != b'-' {
            return Err(invalid("expected 00-<32 hex>-<16 hex>-<2 hex>"));
        }
        if !(lower_hex(0..2) && lower_hex(3..35) && lower_hex(36..52) && lower_hex(53..55)) {
            return Err(invalid("its fields must be lowercase hexadecimal"));
        }
        if version == "ff" {
            return Err(invalid("version ff is not allowed"));
        }
        if head[3..35].iter().all(|byte| *byte == b'0') {
            return Err(invalid("the trace id is all zeros"));
        }
        if head[36..52].iter().all(|byte| *byte == b'0') {
            return Err(invalid("the parent id is all zeros"));
        }
        Ok(TraceParent(Arc::from(&text[..TRACEPARENT_LEN])))
    }

    /// The value, 55 characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The trace id, 32 hex digits.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The parent (span) id, 16 hex digits.
    pub fn parent_id(&self) -> &str {
        &self.0[36..52]
    }

    /// The trace flags, 2 hex digits (`01`: sampled).
    pub fn flags(&self) -> &str {
        &self.0[53..55]
    }
}

fn shorten(text: &str) -> String {
    let mut end = 80.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end < text.len() {
        format!("{}...", &text[..end])
    } else {
        text.to_owned()
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn valid_values_are_kept_and_split() {
        let parent = TraceParent::parse(&format!(" {GOOD} ")).expect("valid");
        assert_eq!(parent.as_str(), GOOD);
        assert_eq!(parent.parent_id(), "b7ad6b7169203331");
        assert_eq!(parent.flags(), "01");
        let later = TraceParent::parse(&format!("01{}-extra", &GOOD[2..])).expect("version 01");
        assert_eq!(later.as_str().len(), TRACEPARENT_LEN);
    }

    #[test]
    fn invalid_values_are_refused_with_a_reason() {
        for (value, reason) in [
            ("", "expected"),
            (
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",
                "expected",
            ),
            (&format!("{GOOD}-x") as &str, "55 characters"),
            (
                "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                "lowercase",
            ),
            (
                "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "version ff",
            ),
            (
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                "trace id",
            ),
            (
                "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                "parent id",
            ),
            (
                "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "expected",
            ),
        ] {
            let error = TraceParent::parse(value).expect_err(value).to_string();
            assert!(error.contains(reason), "{value:?}: {error}");
            assert!(error.contains("traceparent"), "{error}");
        }
    }
}
