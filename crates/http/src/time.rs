//! Due times as people write them: milliseconds since the epoch, RFC 3339, humantime delays.

use std::time::{Duration, UNIX_EPOCH};

use delayq_engine::recurring::spec::parse_time_ms;
use delayq_storage::MAX_DUE_MS;

/// A humantime duration (`500ms`, `30s`, `1h 30m`).
///
/// # Errors
/// A message naming the text and the expected form.
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|error| {
        format!("{text:?}: {error} (expected a duration such as 500ms, 30s, 5m or 1h 30m)")
    })
}

/// An absolute time, for the CLI's `--at` and the API's `"at"`: RFC 3339 with any offset
/// (`2030-01-01T09:00:00+02:00`, `2030-01-01T07:00:00Z`) or milliseconds since the Unix
/// epoch. A number below 10^11 is refused: it looks like seconds. The parser is the one of
/// the recurring schedules' `start_at` / `end_at`
/// ([`delayq_engine::recurring::spec::parse_time_ms`]); on top of it, a time without an
/// offset (`2023-11-14 22:13:20.5`, `2023-11-14T22:13:20`: the `T` may be a space, fractions
/// are optional) is still read as UTC, as earlier releases did.
///
/// # Errors
/// What is wrong, with the expected forms (the caller names the field and the value).
pub fn parse_at(text: &str) -> Result<u64, String> {
    let error = match parse_time_ms("at", text) {
        Ok(ms) => return Ok(ms),
        Err(error) => error,
    };
    let trimmed = text.trim();
    let numeric = trimmed.bytes().all(|byte| byte.is_ascii_digit());
    if !numeric {
        if let Ok(time) = humantime::parse_rfc3339_weak(trimmed) {
            let since_epoch = time
                .duration_since(UNIX_EPOCH)
                .map_err(|_| "is before 1970".to_owned())?;
            return u64::try_from(since_epoch.as_millis())
                .ok()
                .filter(|ms| *ms <= MAX_DUE_MS)
                .ok_or_else(|| "is after 9999-12-31".to_owned());
        }
    }
    Err(error.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_accepts_epoch_ms_and_rfc3339_utc_with_or_without_z() {
        assert_eq!(parse_at("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_at("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_at("2023-11-14 22:13:20.5"), Ok(1_700_000_000_500));
        assert!(parse_at("tomorrow")
            .expect_err("not a time")
            .contains("RFC 3339"));
        assert!(parse_at("").is_err());
    }

    #[test]
    fn at_accepts_rfc3339_with_any_offset() {
        assert_eq!(parse_at("2023-11-15T00:13:20+02:00"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_at("2023-11-14T17:13:20.250-05:00"),
            Ok(1_700_000_000_250)
        );
        assert_eq!(parse_at(" 2023-11-14T22:13:20Z "), Ok(1_700_000_000_000));
    }

    #[test]
    fn at_refuses_seconds_with_a_hint() {
        let error = parse_at("1700000000").expect_err("seconds");
        assert!(
            error.contains("looks like seconds since the epoch")
                && error.contains("1700000000000")
                && error.contains("RFC 3339"),
            "{error}"
        );
        assert_eq!(parse_at("100000000000"), Ok(100_000_000_000));
    }

    #[test]
    fn at_refuses_times_out_of_range() {
        assert!(parse_at("1969-12-31T23:59:59Z").is_err());
        assert!(parse_at("99999999999999999999").is_err());
        assert!(parse_at("2023-13-01T00:00:00Z").is_err());
    }

    #[test]
    fn delay_is_humantime() {
        assert_eq!(parse_delay("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(parse_delay("5parsecs").is_err());
    }
}
