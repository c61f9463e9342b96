//! [`RawSpec`]: a spec's fields as a user types them, and the parsers that check them.

use delayq_storage::{QueueName, MAX_DUE_MS};
use serde::{Deserialize, Deserializer};

use super::{
    Cadence, Misfire, Overlap, RecurringSpec, SpecError, DEFAULT_MAX_CATCHUP,
    DEFAULT_MISFIRE_GRACE_MS, MAX_MAX_CATCHUP, MIN_EVERY_MS,
};
use crate::recurring::calendar::Calendar;

/// Epoch milliseconds below this (10^11, i.e. 1973-03-03) are refused: they look like seconds.
pub const MIN_PLAUSIBLE_EPOCH_MS: u64 = 100_000_000_000;

/// A spec as typed by a user: every field as text, as the CLI flags, an HTTP JSON body or a
/// `cluster.yaml` entry give it. Unknown keys are refused when deserializing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    /// The queue (required).
    #[serde(default)]
    pub queue: Option<String>,
    /// A cron expression (exactly one of `cron` and `every`).
    #[serde(default)]
    pub cron: Option<String>,
    /// The IANA zone of `cron` (default `UTC`; refused with `every`).
    #[serde(default)]
    pub tz: Option<String>,
    /// A humantime duration ≥ 1 s (exactly one of `cron` and `every`).
    #[serde(default)]
    pub every: Option<String>,
    /// The payload of every tick.
    #[serde(default)]
    pub payload: Option<String>,
    /// `skip`, `once` (default) or `all`.
    #[serde(default)]
    pub misfire: Option<String>,
    /// A humantime duration (default `1m`).
    #[serde(default)]
    pub misfire_grace: Option<String>,
    /// An integer 1..=10000 (default 100); a JSON number or string.
    #[serde(default, deserialize_with = "text_or_number")]
    pub max_catchup: Option<String>,
    /// `allow` (default) or `skip`.
    #[serde(default)]
    pub overlap: Option<String>,
    /// RFC 3339 with any offset, or epoch milliseconds (a JSON number or string).
    #[serde(default, deserialize_with = "text_or_number")]
    pub start_at: Option<String>,
    /// RFC 3339 with any offset, or epoch milliseconds; after `start_at`.
    #[serde(default, deserialize_with = "text_or_number")]
    pub end_at: Option<String>,
}

impl RawSpec {
    /// The names of the fields, as `cluster.yaml`, the HTTP body and the CLI flags spell them
    /// (the flags with `-` for `_`).
    pub const FIELDS: [&'static str; 11] = [
        "queue",
        "cron",
        "tz",
        "every",
        "payload",
        "misfire",
        "misfire_grace",
        "max_catchup",
        "overlap",
        "start_at",
        "end_at",
    ];

    /// The field named `name` (one of [`RawSpec::FIELDS`]), to fill in; `None` for another name.
    pub fn field_mut(&mut self, name: &str) -> Option<&mut Option<String>> {
        Some(match name {
            "queue" => &mut self.queue,
            "cron" => &mut self.cron,
            "tz" => &mut self.tz,
            "every" => &mut self.every,
            "payload" => &mut self.payload,
            "misfire" => &mut self.misfire,
            "misfire_grace" => &mut self.misfire_grace,
            "max_catchup" => &mut self.max_catchup,
            "overlap" => &mut self.overlap,
            "start_at" => &mut self.start_at,
            "end_at" => &mut self.end_at,
            _ => return None,
        })
    }

    /// Checks every field and builds the spec.
    ///
    /// # Errors
    /// The first invalid field, as a [`SpecError`] naming it and its value.
    pub fn validate(self) -> Result<RecurringSpec, SpecError> {
        let queue = match self.queue.as_deref() {
            Some(queue) => parse_queue(queue.trim())?,
            None => return Err(SpecError::new("queue", "", "a queue is required")),
        };
        let cadence = match (self.cron, self.every) {
            (Some(_), Some(every)) => {
                return Err(SpecError::new(
                    "every",
                    every,
                    "give either cron or every, not both",
                ))
            }
            (None, None) => {
                return Err(SpecError::new(
                    "cron",
                    "",
                    "one of cron or every is required",
                ))
            }
            (Some(expr), None) => Cadence::Cron {
                expr: expr.trim().to_owned(),
                tz: self
                    .tz
                    .map_or_else(|| "UTC".to_owned(), |tz| tz.trim().to_owned()),
            },
            (None, Some(every)) => {
                if let Some(tz) = self.tz {
                    return Err(SpecError::new(
                        "tz",
                        tz,
                        "a zone applies to cron only; every counts real time",
                    ));
                }
                let every_ms = parse_duration_ms("every", &every)?;
                Cadence::Every {
                    every_ms: check_every_ms(every_ms, &every)?,
                }
            }
        };
        Calendar::new(&cadence)?;
        let misfire = self
            .misfire
            .as_deref()
            .map_or(Ok(Misfire::Once), str::parse)?;
        let overlap = self
            .overlap
            .as_deref()
            .map_or(Ok(Overlap::Allow), str::parse)?;
        let misfire_grace_ms = match self.misfire_grace.as_deref() {
            Some(text) => parse_duration_ms("misfire_grace", text)?,
            None => DEFAULT_MISFIRE_GRACE_MS,
        };
        let max_catchup = match self.max_catchup.as_deref() {
            Some(text) => {
                let number = text.trim().parse::<u32>().map_err(|_| {
                    SpecError::new("max_catchup", text, "expected an integer 1..=10000")
                })?;
                check_max_catchup(number, text)?
            }
            None => DEFAULT_MAX_CATCHUP,
        };
        let start_at_ms = self
            .start_at
            .as_deref()
            .map(|text| parse_time_ms("start_at", text))
            .transpose()?;
        let end_at_ms = self
            .end_at
            .as_deref()
            .map(|text| parse_time_ms("end_at", text))
            .transpose()?;
        check_window(start_at_ms, end_at_ms, self.end_at.as_deref())?;
        Ok(RecurringSpec {
            queue,
            cadence,
            payload: self.payload,
            misfire,
            misfire_grace_ms,
            max_catchup,
            overlap,
            start_at_ms,
            end_at_ms,
        })
    }
}

/// Accepts a JSON/YAML string or a non-negative integer as text.
fn text_or_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrNumber {
        Text(String),
        Number(u64),
    }
    Ok(
        Option::<TextOrNumber>::deserialize(deserializer)?.map(|value| match value {
            TextOrNumber::Text(text) => text,
            TextOrNumber::Number(number) => number.to_string(),
        }),
    )
}

pub(super) fn parse_queue(text: &str) -> Result<QueueName, SpecError> {
    QueueName::new(text).map_err(|error| SpecError::new("queue", text, error.to_string()))
}

/// A humantime duration in whole milliseconds.
pub(super) fn parse_duration_ms(field: &'static str, text: &str) -> Result<u64, SpecError> {
    let duration = humantime::parse_duration(text.trim()).map_err(|error| {
        SpecError::new(
            field,
            text,
            format!("{error} (expected a duration such as 30s, 5m or 1h 30m)"),
        )
    })?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(SpecError::new(
            field,
            text,
            "must be a whole number of milliseconds",
        ));
    }
    match u64::try_from(duration.as_millis()) {
        Ok(ms) if ms <= MAX_DUE_MS => Ok(ms),
        _ => Err(SpecError::new(field, text, "is too long")),
    }
}

pub(super) fn check_every_ms(every_ms: u64, text: &str) -> Result<u64, SpecError> {
    if every_ms < MIN_EVERY_MS {
        return Err(SpecError::new("every", text, "must be at least 1s"));
    }
    if every_ms > MAX_DUE_MS {
        return Err(SpecError::new("every", text, "is too long"));
    }
    Ok(every_ms)
}

pub(super) fn check_max_catchup(number: u32, text: &str) -> Result<u32, SpecError> {
    if (1..=MAX_MAX_CATCHUP).contains(&number) {
        Ok(number)
    } else {
        Err(SpecError::new(
            "max_catchup",
            text,
            "must be an integer 1..=10000",
        ))
    }
}

/// `end_at` after `start_at`; `end_text` is `end_at` as given (for the error).
pub(super) fn check_window(
    start_at_ms: Option<u64>,
    end_at_ms: Option<u64>,
    end_text: Option<&str>,
) -> Result<(), SpecError> {
    if let (Some(start), Some(end)) = (start_at_ms, end_at_ms) {
        if end <= start {
            let value = end_text.map_or_else(|| end.to_string(), str::to_owned);
            return Err(SpecError::new(
                "end_at",
                value,
                format!("must be after start_at ({start} ms)"),
            ));
        }
    }
    Ok(())
}

/// An absolute time as a user writes it: RFC 3339 with any offset
/// (`2030-01-01T09:00:00+02:00`) or epoch milliseconds. Epoch milliseconds below 10^11 are
/// refused with a hint (they look like seconds), and so are times after 9999-12-31.
///
/// # Errors
/// A [`SpecError`] naming `field` and `text`.
pub fn parse_time_ms(field: &'static str, text: &str) -> Result<u64, SpecError> {
    let trimmed = text.trim();
    let ms = if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        let ms = trimmed
            .parse::<u64>()
            .map_err(|_| SpecError::new(field, text, "is too large for epoch milliseconds"))?;
        if ms < MIN_PLAUSIBLE_EPOCH_MS {
            return Err(SpecError::new(
                field,
                text,
                format!(
                    "looks like seconds since the epoch; give milliseconds (x1000: {}) or RFC 3339",
                    ms.saturating_mul(1000)
                ),
            ));
        }
        ms
    } else {
        let time = chrono::DateTime::parse_from_rfc3339(trimmed).map_err(|error| {
            SpecError::new(
                field,
                text,
                format!(
                    "{error} (expected RFC 3339 such as 2030-01-01T09:00:00+02:00, or epoch milliseconds)"
                ),
            )
        })?;
        u64::try_from(time.timestamp_millis())
            .map_err(|_| SpecError::new(field, text, "is before 1970"))?
    };
    if ms > MAX_DUE_MS {
        return Err(SpecError::new(field, text, "is after 9999-12-31"));
    }
    Ok(ms)
}
