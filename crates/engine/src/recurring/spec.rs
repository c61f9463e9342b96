//! A recurring schedule's spec: its name, cadence, queue, payload and policies.
//!
//! [`RawSpec`] holds the fields as a user types them (CLI flags, an HTTP JSON body,
//! `cluster.yaml`); [`RawSpec::validate`] turns it into a [`RecurringSpec`] or a [`SpecError`]
//! that names the field and the value. [`RecurringSpec::to_canonical_json`] is the stored form:
//! the same spec always gives the same bytes, so an upsert can tell `unchanged` from `updated`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use delayq_storage::{QueueName, MAX_DUE_MS};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::calendar::Calendar;

/// The longest schedule name, in characters.
pub const MAX_SCHEDULE_NAME_CHARS: usize = 128;

/// The default `misfire_grace`: one minute.
pub const DEFAULT_MISFIRE_GRACE_MS: u64 = 60_000;

/// The default `max_catchup`.
pub const DEFAULT_MAX_CATCHUP: u32 = 100;

/// The largest `max_catchup` accepted.
pub const MAX_MAX_CATCHUP: u32 = 10_000;

/// The shortest `every`: one second.
pub const MIN_EVERY_MS: u64 = 1_000;

/// The version of [`RecurringSpec::to_canonical_json`]'s format (its `"v"` field).
pub const SPEC_FORMAT_VERSION: u32 = 1;

/// Epoch milliseconds below this (10^11, i.e. 1973-03-03) are refused: they look like seconds.
const MIN_PLAUSIBLE_EPOCH_MS: u64 = 100_000_000_000;

/// A field of a recurring spec that is invalid: which field, the value given, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid recurring field '{field}' = {value:?}: {reason}")]
pub struct SpecError {
    /// The field's name as the user writes it (`cron`, `tz`, `every`, `max_catchup`, ...).
    pub field: &'static str,
    /// The value given (empty when the field is missing).
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl SpecError {
    /// An error for `field` with `value` and `reason`.
    pub fn new(field: &'static str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        SpecError {
            field,
            value: value.into(),
            reason: reason.into(),
        }
    }
}

/// A schedule's name: 1..=128 characters of `[A-Za-z0-9_.:-]` (never `@`, which separates the
/// name from the tick time in a tick's task id `<NAME>@<tick_ms>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleName(String);

impl ScheduleName {
    /// Validates `name`.
    ///
    /// # Errors
    /// A [`SpecError`] for field `name` when it is empty, too long or has another character.
    pub fn new(name: &str) -> Result<Self, SpecError> {
        let invalid = |reason: &str| SpecError::new("name", name, reason);
        if name.is_empty() {
            return Err(invalid("it is empty"));
        }
        if name.chars().count() > MAX_SCHEDULE_NAME_CHARS {
            return Err(invalid("it is longer than 128 characters"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
        {
            return Err(invalid(
                "only A-Z, a-z, 0-9, '_', '.', ':' and '-' are allowed",
            ));
        }
        Ok(ScheduleName(name.to_owned()))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ScheduleName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ScheduleName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ScheduleName::new(&text).map_err(serde::de::Error::custom)
    }
}

/// What to do with ticks that could not fire within `misfire_grace` of their time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Misfire {
    /// Fire none of them.
    Skip,
    /// Fire the latest missed tick once, at once (the default).
    #[default]
    Once,
    /// Fire each missed tick, oldest first, at most `max_catchup` of them.
    All,
}

impl Misfire {
    /// The name as written in a spec (`skip`, `once`, `all`).
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::Once => "once",
            Misfire::All => "all",
        }
    }
}

impl FromStr for Misfire {
    type Err = SpecError;

    /// `skip`, `once` or `all` (ASCII case ignored).
    fn from_str(text: &str) -> Result<Self, SpecError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "skip" => Ok(Misfire::Skip),
            "once" => Ok(Misfire::Once),
            "all" => Ok(Misfire::All),
            _ => Err(SpecError::new(
                "misfire",
                text,
                "expected skip, once or all",
            )),
        }
    }
}

/// What to do with a tick while the schedule's previous tick is still pending or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Fire it anyway (the default).
    #[default]
    Allow,
    /// Skip it (counted as skipped).
    Skip,
}

impl Overlap {
    /// The name as written in a spec (`allow`, `skip`).
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }
}

impl FromStr for Overlap {
    type Err = SpecError;

    /// `allow` or `skip` (ASCII case ignored).
    fn from_str(text: &str) -> Result<Self, SpecError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "allow" => Ok(Overlap::Allow),
            "skip" => Ok(Overlap::Skip),
            _ => Err(SpecError::new("overlap", text, "expected allow or skip")),
        }
    }
}

/// When a schedule ticks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Cadence {
    /// A cron expression whose fields are read in an IANA zone.
    Cron {
        /// The expression as given (5 or 6 fields, or an `@` nickname).
        expr: String,
        /// The IANA zone name (`UTC` unless given).
        tz: String,
    },
    /// Ticks at `anchor + k × every_ms` in real time (k ≥ 0).
    Every {
        /// The period in milliseconds (≥ 1000).
        every_ms: u64,
    },
}

/// A validated recurring spec (everything but the schedule's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecurringSpec {
    /// The queue the ticks fire into.
    pub queue: QueueName,
    /// When it ticks.
    pub cadence: Cadence,
    /// The payload of every tick (none: empty).
    pub payload: Option<String>,
    /// The misfire policy.
    pub misfire: Misfire,
    /// How late a tick may fire before it counts as missed, in milliseconds.
    pub misfire_grace_ms: u64,
    /// With `misfire: all`, how many missed ticks fire at most.
    pub max_catchup: u32,
    /// The overlap policy.
    pub overlap: Overlap,
    /// Nothing fires before this (epoch ms); also the anchor of an `every` cadence.
    pub start_at_ms: Option<u64>,
    /// Nothing fires at or after this (epoch ms).
    pub end_at_ms: Option<u64>,
}

/// The stored form, field order fixed (serde serializes struct fields in declaration order, so
/// the JSON text is deterministic whatever features `serde_json` is built with).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSpec {
    v: u32,
    queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    every_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    misfire: Misfire,
    misfire_grace_ms: u64,
    max_catchup: u32,
    overlap: Overlap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end_at_ms: Option<u64>,
}

impl RecurringSpec {
    /// The canonical stored JSON: `{"v":1,"queue":..,("cron","tz"|"every_ms"),..}` with a fixed
    /// key order and no whitespace. The same spec always gives the same bytes.
    pub fn to_canonical_json(&self) -> String {
        let (cron, tz, every_ms) = match &self.cadence {
            Cadence::Cron { expr, tz } => (Some(expr.clone()), Some(tz.clone()), None),
            Cadence::Every { every_ms } => (None, None, Some(*every_ms)),
        };
        let stored = StoredSpec {
            v: SPEC_FORMAT_VERSION,
            queue: self.queue.as_str().to_owned(),
            cron,
            tz,
            every_ms,
            payload: self.payload.clone(),
            misfire: self.misfire,
            misfire_grace_ms: self.misfire_grace_ms,
            max_catchup: self.max_catchup,
            overlap: self.overlap,
            start_at_ms: self.start_at_ms,
            end_at_ms: self.end_at_ms,
        };
        // A struct of strings, integers and unit enums always serializes.
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// Reads [`RecurringSpec::to_canonical_json`]'s output back, validating it again.
    ///
    /// # Errors
    /// A [`SpecError`] for field `spec` when the JSON is not a stored spec of a known version,
    /// or the field's own error when a value is invalid.
    pub fn from_stored_json(json: &str) -> Result<Self, SpecError> {
        let stored: StoredSpec = serde_json::from_str(json)
            .map_err(|error| SpecError::new("spec", preview(json), error.to_string()))?;
        if stored.v != SPEC_FORMAT_VERSION {
            return Err(SpecError::new(
                "spec",
                preview(json),
                format!(
                    "stored format version {} is not known (this build reads {SPEC_FORMAT_VERSION})",
                    stored.v
                ),
            ));
        }
        let cadence = match (stored.cron, stored.tz, stored.every_ms) {
            (Some(expr), tz, None) => Cadence::Cron {
                expr,
                tz: tz.unwrap_or_else(|| "UTC".to_owned()),
            },
            (None, None, Some(every_ms)) => Cadence::Every { every_ms },
            _ => {
                return Err(SpecError::new(
                    "spec",
                    preview(json),
                    "a stored spec has either cron (and tz) or every_ms",
                ))
            }
        };
        if let Cadence::Every { every_ms } = cadence {
            check_every_ms(every_ms, &every_ms.to_string())?;
        }
        Calendar::new(&cadence)?;
        let spec = RecurringSpec {
            queue: parse_queue(&stored.queue)?,
            cadence,
            payload: stored.payload,
            misfire: stored.misfire,
            misfire_grace_ms: stored.misfire_grace_ms,
            max_catchup: check_max_catchup(stored.max_catchup, &stored.max_catchup.to_string())?,
            overlap: stored.overlap,
            start_at_ms: stored.start_at_ms,
            end_at_ms: stored.end_at_ms,
        };
        check_window(spec.start_at_ms, spec.end_at_ms)?;
        Ok(spec)
    }

    /// The cadence in a few words: `cron "0 9 * * *" Europe/Berlin` or `every 30s`.
    pub fn describe_cadence(&self) -> String {
        match &self.cadence {
            Cadence::Cron { expr, tz } => format!("cron {expr:?} {tz}"),
            Cadence::Every { every_ms } => format!(
                "every {}",
                humantime::format_duration(Duration::from_millis(*every_ms))
            ),
        }
    }

    /// The spec's [`Calendar`].
    ///
    /// # Errors
    /// Only for a spec built by hand with an invalid cadence ([`RawSpec::validate`] and
    /// [`RecurringSpec::from_stored_json`] check it).
    pub fn calendar(&self) -> Result<Calendar, SpecError> {
        Calendar::new(&self.cadence)
    }
}

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
        check_window(start_at_ms, end_at_ms)?;
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

fn parse_queue(text: &str) -> Result<QueueName, SpecError> {
    QueueName::new(text).map_err(|error| SpecError::new("queue", text, error.to_string()))
}

/// A humantime duration in whole milliseconds.
fn parse_duration_ms(field: &'static str, text: &str) -> Result<u64, SpecError> {
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

fn check_every_ms(every_ms: u64, text: &str) -> Result<u64, SpecError> {
    if every_ms < MIN_EVERY_MS {
        return Err(SpecError::new("every", text, "must be at least 1s"));
    }
    if every_ms > MAX_DUE_MS {
        return Err(SpecError::new("every", text, "is too long"));
    }
    Ok(every_ms)
}

fn check_max_catchup(number: u32, text: &str) -> Result<u32, SpecError> {
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

fn check_window(start_at_ms: Option<u64>, end_at_ms: Option<u64>) -> Result<(), SpecError> {
    if let (Some(start), Some(end)) = (start_at_ms, end_at_ms) {
        if end <= start {
            return Err(SpecError::new(
                "end_at",
                end.to_string(),
                format!("must be after start_at ({start})"),
            ));
        }
    }
    Ok(())
}

/// RFC 3339 with any offset, or epoch milliseconds (≥ 10^11, ≤ 9999-12-31).
pub(crate) fn parse_time_ms(field: &'static str, text: &str) -> Result<u64, SpecError> {
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
                    "epoch milliseconds below 10^11 look like seconds (did you mean {}?)",
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

/// At most 200 characters of `text`, for an error message.
fn preview(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests;
