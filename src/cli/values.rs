//! Parsers for command line values (durations, absolute times, queue names) and the
//! encoding of payloads in JSON output.

use std::time::Duration;

use delayq_storage::{QueueName, ScheduleMode, TaskId, TraceParent};
use serde_json::{Map, Value};

/// A humantime duration (`500ms`, `30s`, `1h 30m`), for clap.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|error| format!("{error} (expected a duration such as 500ms, 30s, 5m or 1h 30m)"))
}

/// An absolute due time, for clap: RFC 3339 with any offset (`2030-01-01T09:00:00+02:00`;
/// without an offset it is UTC) or milliseconds since the Unix epoch (a number below 10^11
/// is refused: it looks like seconds). The same parser reads the HTTP API's `"at"`.
pub fn at_time(text: &str) -> Result<u64, String> {
    delayq_http::time::parse_at(text)
}

/// A schedule mode, for clap: `replace`, `if_absent`, `earlier` or `later`.
pub fn schedule_mode(text: &str) -> Result<ScheduleMode, String> {
    text.parse::<ScheduleMode>()
        .map_err(|error| error.to_string())
}

/// A W3C `traceparent`, for clap.
pub fn traceparent(text: &str) -> Result<TraceParent, String> {
    TraceParent::parse(text).map_err(|error| error.to_string())
}

/// A valid queue name, for clap (checked before any connection is made).
pub fn queue_name(text: &str) -> Result<String, String> {
    QueueName::new(text)
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

/// A valid task id, for clap.
pub fn task_id(text: &str) -> Result<String, String> {
    TaskId::new(text)
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

/// Puts the payload into `object`: as `"payload"` (a string) when it is UTF-8, else as
/// `"payload_base64"` (the HTTP API's encoding too).
pub fn insert_payload(object: &mut Map<String, Value>, payload: &[u8]) {
    delayq_http::json::insert_payload(object, payload);
}

/// A duration as a short human text (`1.2s`, `3m 4s`), for tables.
pub fn short_duration(ms: u64) -> String {
    if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_time_accepts_epoch_ms_and_rfc3339_utc() {
        assert_eq!(at_time("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(at_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(at_time("2023-11-14 22:13:20.5"), Ok(1_700_000_000_500));
        assert!(at_time("tomorrow")
            .expect_err("not a time")
            .contains("RFC 3339"));
        assert!(at_time("").is_err());
        assert_eq!(at_time("2023-11-15T00:13:20+02:00"), Ok(1_700_000_000_000));
        assert!(at_time("1700000000")
            .expect_err("seconds")
            .contains("looks like seconds"));
    }

    #[test]
    fn schedule_mode_names_the_bad_value() {
        assert_eq!(schedule_mode("earlier"), Ok(ScheduleMode::Earlier));
        assert_eq!(schedule_mode("replace"), Ok(ScheduleMode::Upsert));
        let error = schedule_mode("sooner").expect_err("unknown");
        assert!(
            error.contains("\"sooner\"") && error.contains("if_absent"),
            "{error}"
        );
    }

    #[test]
    fn short_duration_is_readable() {
        assert_eq!(short_duration(1234), "1.2s");
        assert_eq!(short_duration(184_000), "3m 4s");
    }
}
