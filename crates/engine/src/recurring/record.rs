//! What a schedule's record in the store holds (its spec and its tick state), and the public
//! view of a schedule ([`RecurringSchedule`]).
//!
//! The record is one JSON text, swapped whole by compare-and-set
//! ([`RecurringStore::recurring_swap`](delayq_storage::RecurringStore::recurring_swap)), so
//! every change to a schedule (an upsert, a pause, the driver advancing it) is atomic and two
//! writers can never interleave. Invariants the writers keep:
//! - `next_ms` is `None` exactly when the schedule is paused or has no tick left (`end_at`).
//! - `next_ms`, when set, is after `last_tick_ms`: a tick once created is never due again.
//! - `unforgotten` names the ticks whose ledger entries the next step forgets; only ticks the
//!   state has moved past are put there.

use serde::{Deserialize, Serialize};

use super::spec::{RecurringSpec, SpecError};

/// The record format version.
const VERSION: u32 = 1;

/// A schedule's record as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleRecord {
    /// The format version.
    pub v: u32,
    /// The canonical spec JSON ([`RecurringSpec::to_canonical_json`]): an upsert with the same
    /// text is `unchanged`.
    pub spec: String,
    /// The anchor of an `every` cadence: `start_at`, else when the schedule was created.
    pub anchor_ms: u64,
    /// When it was created and last changed by a user (cluster clock).
    pub created_ms: u64,
    /// When a user last changed it.
    pub updated_ms: u64,
    /// Paused since this time (cluster clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_ms: Option<u64>,
    /// The next tick to create; `None` while paused or when no tick is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_ms: Option<u64>,
    /// The latest tick whose task was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick_ms: Option<u64>,
    /// Ticks created by the step that wrote this record, whose ledger entries the next step
    /// forgets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unforgotten: Vec<u64>,
    /// Ticks fired (their task created).
    pub fired: u64,
    /// Ticks skipped (overlap, pause).
    pub skipped: u64,
    /// Ticks missed (no node could fire them within `misfire_grace`).
    pub missed: u64,
}

impl ScheduleRecord {
    /// A new record for `spec`.
    pub(crate) fn new(spec: &RecurringSpec, anchor_ms: u64, now_ms: u64) -> Self {
        ScheduleRecord {
            v: VERSION,
            spec: spec.to_canonical_json(),
            anchor_ms,
            created_ms: now_ms,
            updated_ms: now_ms,
            paused_ms: None,
            next_ms: None,
            last_tick_ms: None,
            unforgotten: Vec::new(),
            fired: 0,
            skipped: 0,
            missed: 0,
        }
    }

    /// Reads a stored record.
    pub(crate) fn decode(text: &str) -> Result<Self, String> {
        let record: ScheduleRecord = serde_json::from_str(text)
            .map_err(|error| format!("not a schedule record: {error}"))?;
        if record.v != VERSION {
            return Err(format!("unknown schedule record version {}", record.v));
        }
        Ok(record)
    }

    /// The stored text.
    pub(crate) fn encode(&self) -> String {
        // A struct of strings, numbers and vectors always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The spec.
    pub(crate) fn spec(&self) -> Result<RecurringSpec, SpecError> {
        RecurringSpec::from_stored_json(&self.spec)
    }
}

/// A recurring schedule as `delayq recurring get` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecurringSchedule {
    /// Its name.
    pub name: String,
    /// Its spec.
    pub spec: RecurringSpec,
    /// Whether it is paused.
    pub paused: bool,
    /// The next tick it will fire, if any (none while paused or after `end_at`).
    pub next_ms: Option<u64>,
    /// The latest tick whose task was created.
    pub last_tick_ms: Option<u64>,
    /// When the latest tick handed to a handler started running (cluster clock).
    pub last_fired_ms: Option<u64>,
    /// Ticks fired.
    pub fired: u64,
    /// Ticks skipped (overlap, pause).
    pub skipped: u64,
    /// Ticks missed.
    pub missed: u64,
    /// When it was created.
    pub created_ms: u64,
    /// When a user last changed it.
    pub updated_ms: u64,
}

impl RecurringSchedule {
    /// The view of a stored record.
    pub(crate) fn from_record(
        name: &str,
        record: &ScheduleRecord,
        last_fired: Option<(u64, u64)>,
    ) -> Result<Self, SpecError> {
        Ok(RecurringSchedule {
            name: name.to_owned(),
            spec: record.spec()?,
            paused: record.paused_ms.is_some(),
            next_ms: record.next_ms,
            last_tick_ms: record.last_tick_ms,
            last_fired_ms: last_fired.map(|(_, fired_ms)| fired_ms),
            fired: record.fired,
            skipped: record.skipped,
            missed: record.missed,
            created_ms: record.created_ms,
            updated_ms: record.updated_ms,
        })
    }
}

/// What an upsert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpsertResult {
    /// There was no schedule of that name.
    Created,
    /// The spec differed; the next tick is the new spec's first after now.
    Updated,
    /// The same spec was there: nothing moved.
    Unchanged,
}

impl UpsertResult {
    /// `created`, `updated` or `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            UpsertResult::Created => "created",
            UpsertResult::Updated => "updated",
            UpsertResult::Unchanged => "unchanged",
        }
    }
}

/// The answer to an upsert (`delayq recurring set`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecurringSet {
    /// The schedule's name.
    pub name: String,
    /// Its queue.
    pub queue: String,
    /// Its next tick, if any.
    pub next_ms: Option<u64>,
    /// What the upsert did.
    pub result: UpsertResult,
}
