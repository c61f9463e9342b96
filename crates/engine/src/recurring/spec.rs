//! A recurring schedule's spec: its name, cadence, queue, payload and policies.
//!
//! [`RawSpec`] holds the fields as a user types them (CLI flags, an HTTP JSON body,
//! `cluster.yaml`); [`RawSpec::validate`] turns it into a [`RecurringSpec`] or a [`SpecError`]
//! that names the field and the value. [`RecurringSpec::to_canonical_json`] is the stored form:
//! the same spec always gives the same bytes, so an upsert can tell `unchanged` from `updated`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use delayq_storage::QueueName;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::calendar::Calendar;

mod raw;

pub use raw::RawSpec;
use raw::{check_every_ms, check_max_catchup, check_window, parse_queue};
pub use raw::{parse_time_ms, MIN_PLAUSIBLE_EPOCH_MS};

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
        check_window(spec.start_at_ms, spec.end_at_ms, None)?;
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

/// At most 200 characters of `text`, for an error message.
fn preview(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests;
