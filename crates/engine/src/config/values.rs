//! Scalar conversions: YAML values to durations, sizes, counts and strings, with errors that
//! name the key, the value and the line.

use std::time::Duration;

use super::error::ConfigError;
use super::yaml::{Node, Value};

/// The longest duration accepted anywhere: ten years. Longer is surely a typo, and keeping
/// durations small keeps `Instant + duration` arithmetic far from overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A value error for `key` pointing at `node`.
pub(crate) fn invalid(key: &str, node: &Node, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_owned(),
        value: node.value.describe(),
        reason: reason.into(),
        line: Some(node.line),
    }
}

/// Rejects an empty value with a hint; an absent key is how one asks for the default.
fn present(key: &str, node: &Node) -> Result<(), ConfigError> {
    if node.value == Value::Null {
        return Err(invalid(
            key,
            node,
            "missing value (leave the key out to use the default)",
        ));
    }
    Ok(())
}

/// A humantime duration such as `500ms`, `30s`, `1h 30m` (or a bare `0`).
pub(crate) fn duration(key: &str, node: &Node) -> Result<Duration, ConfigError> {
    present(key, node)?;
    const EXPECTED: &str = "expected a duration with a unit, such as 500ms, 30s or 1h";
    let text = match &node.value {
        Value::Str(text) => text.trim(),
        Value::Int(0) => return Ok(Duration::ZERO),
        _ => return Err(invalid(key, node, EXPECTED)),
    };
    let parsed = humantime::parse_duration(text)
        .map_err(|error| invalid(key, node, format!("{EXPECTED} ({error})")))?;
    if parsed > MAX_DURATION {
        return Err(invalid(key, node, "longer than the 10 years accepted"));
    }
    Ok(parsed)
}

/// A non-negative whole number that fits `T`.
pub(crate) fn count<T: TryFrom<i128>>(key: &str, node: &Node) -> Result<T, ConfigError> {
    present(key, node)?;
    match node.value {
        Value::Int(number) if number >= 0 => {
            T::try_from(number).map_err(|_| invalid(key, node, "the number is too large"))
        }
        _ => Err(invalid(key, node, "expected a non-negative whole number")),
    }
}

/// A size in bytes: a whole number, or a number with a unit (`B`, `KB`, `MB`, `GB` are
/// powers of 1000; `KiB`, `MiB`, `GiB` powers of 1024; case-insensitive), e.g. `1MiB`.
pub(crate) fn size(key: &str, node: &Node) -> Result<usize, ConfigError> {
    present(key, node)?;
    let text = match &node.value {
        Value::Int(_) => return count(key, node),
        Value::Str(text) => text.trim(),
        _ => return Err(invalid(key, node, SIZE_EXPECTED)),
    };
    parse_size(text).ok_or_else(|| invalid(key, node, SIZE_EXPECTED))
}

const SIZE_EXPECTED: &str =
    "expected a size in bytes, such as 1048576, 512KiB or 1MiB (units B, KB, MB, GB, KiB, MiB, GiB)";

fn parse_size(text: &str) -> Option<usize> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let number: usize = digits.parse().ok()?;
    let multiplier: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

/// A string; numbers and booleans are taken as written (`name: 7` is the name "7").
pub(crate) fn string(key: &str, node: &Node) -> Result<String, ConfigError> {
    present(key, node)?;
    match &node.value {
        Value::Str(text) => Ok(text.clone()),
        Value::Int(_) | Value::Float(_) | Value::Bool(_) => Ok(node.value.describe()),
        _ => Err(invalid(key, node, "expected a string")),
    }
}

/// A list of strings, written as a YAML sequence (`[a, b]` or one `- item` per line), or
/// as one comma-separated string.
pub(crate) fn strings(key: &str, node: &Node) -> Result<Vec<String>, ConfigError> {
    present(key, node)?;
    let items: Vec<String> = match &node.value {
        Value::Seq(items) => items
            .iter()
            .map(|item| string(key, item))
            .collect::<Result<_, _>>()?,
        Value::Str(text) => text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => return Err(invalid(key, node, "expected a list of strings")),
    };
    if items.is_empty() {
        return Err(invalid(key, node, "the list is empty"));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: Value) -> Node {
        Node { value, line: 7 }
    }

    #[test]
    fn sizes_take_plain_bytes_and_units() {
        for (text, bytes) in [
            ("1048576", 1_048_576),
            ("1MiB", 1_048_576),
            ("1 mib", 1_048_576),
            ("512KiB", 524_288),
            ("2MB", 2_000_000),
            ("10B", 10),
        ] {
            assert_eq!(
                size("engine.max_payload", &node(Value::Str(text.into()))).expect(text),
                bytes
            );
        }
        assert_eq!(size("k", &node(Value::Int(4096))).expect("int"), 4096);
        for bad in ["", "1.5MiB", "MiB", "1 parsec", "-1"] {
            let error = size("engine.max_payload", &node(Value::Str(bad.into())))
                .expect_err(bad)
                .to_string();
            assert!(
                error.contains("engine.max_payload") && error.contains("line 7"),
                "{error}"
            );
        }
    }

    #[test]
    fn durations_need_a_unit_except_zero() {
        assert_eq!(
            duration("k", &node(Value::Str("1h 30m".into()))).expect("1h 30m"),
            Duration::from_secs(5400)
        );
        assert_eq!(
            duration("k", &node(Value::Int(0))).expect("0"),
            Duration::ZERO
        );
        assert!(duration("k", &node(Value::Int(5))).is_err());
        assert!(duration("k", &node(Value::Str("11years".into()))).is_err());
        let missing = duration("engine.lease", &node(Value::Null)).expect_err("null");
        assert!(
            missing.to_string().contains("leave the key out"),
            "{missing}"
        );
    }

    #[test]
    fn counts_reject_negatives_fractions_and_overflow() {
        assert_eq!(count::<u32>("k", &node(Value::Int(64))).expect("64"), 64);
        assert!(count::<u32>("k", &node(Value::Int(-1))).is_err());
        assert!(count::<u32>("k", &node(Value::Float(1.5))).is_err());
        assert!(count::<u32>("k", &node(Value::Int(1 << 40))).is_err());
        assert!(count::<u32>("k", &node(Value::Str("64".into()))).is_err());
    }
}
