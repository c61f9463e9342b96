//! Due times as people write them: milliseconds since the epoch, RFC 3339, humantime delays.

use std::time::{Duration, UNIX_EPOCH};

/// A humantime duration (`500ms`, `30s`, `1h 30m`).
///
/// # Errors
/// A message naming the text and the expected form.
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|error| {
        format!("{text:?}: {error} (expected a duration such as 500ms, 30s, 5m or 1h 30m)")
    })
}

/// An absolute time: milliseconds since the Unix epoch, or an RFC 3339 time in UTC
/// (`2030-01-01T09:00:00Z`; the `T` may be a space, the `Z` and fractions are optional).
///
/// # Errors
/// A message naming the text and the expected forms.
pub fn parse_at(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map_err(|error| format!("{error} (expected milliseconds since the Unix epoch)"));
    }
    let time = humantime::parse_rfc3339_weak(text).map_err(|error| {
        format!(
            "{error} (expected milliseconds since the Unix epoch or an RFC 3339 UTC time such as 2030-01-01T09:00:00Z)"
        )
    })?;
    let since_epoch = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| "the time is before 1970".to_owned())?;
    u64::try_from(since_epoch.as_millis()).map_err(|_| "the time is too far ahead".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_accepts_epoch_ms_and_rfc3339_utc() {
        assert_eq!(parse_at("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_at("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_at("2023-11-14 22:13:20.5"), Ok(1_700_000_000_500));
        assert!(parse_at("tomorrow")
            .expect_err("not a time")
            .contains("RFC 3339"));
        assert!(parse_at("").is_err());
    }

    #[test]
    fn delay_is_humantime() {
        assert_eq!(parse_delay("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(parse_delay("5parsecs").is_err());
    }
}
