//! The data model: validated names, tasks as they go in and come out, outcomes.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::StorageError;

/// The largest due time accepted: 9999-12-31T23:59:59.999Z in milliseconds since the epoch.
pub const MAX_DUE_MS: u64 = 253_402_300_799_999;

/// The longest task id, in bytes of UTF-8.
pub const MAX_ID_BYTES: usize = 512;

/// The longest queue name, in characters.
pub const MAX_QUEUE_NAME_CHARS: usize = 64;

/// The default largest payload: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// A queue name: 1..=64 characters of `[A-Za-z0-9_.-]`.
///
/// The character set keeps names safe inside Redis keys and hash tags (no `{`, `}` or `:`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueName(Arc<str>);

impl QueueName {
    /// Validates `name`.
    ///
    /// ```
    /// use delayq_storage::QueueName;
    /// assert!(QueueName::new("order-timeout").is_ok());
    /// assert!(QueueName::new("bad:name").is_err());
    /// ```
    pub fn new(name: impl AsRef<str>) -> Result<Self, StorageError> {
        let name = name.as_ref();
        let invalid = |reason: &'static str| StorageError::InvalidQueueName {
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("it is empty"));
        }
        if name.chars().count() > MAX_QUEUE_NAME_CHARS {
            return Err(invalid("it is longer than 64 characters"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(invalid("only A-Z, a-z, 0-9, '_', '.' and '-' are allowed"));
        }
        Ok(QueueName(Arc::from(name)))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// A task's identity inside its queue: 1..=512 bytes of UTF-8 without NUL.
///
/// NUL is refused because an id must travel everywhere a string can: into a child process's
/// environment (`delayq node --handler exec` passes it as `DELAYQ_ID`), C strings, logs.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(Arc<str>);

impl TaskId {
    /// Validates `id`.
    ///
    /// ```
    /// use delayq_storage::TaskId;
    /// assert!(TaskId::new("order-42").is_ok());
    /// assert!(TaskId::new("").is_err());
    /// ```
    pub fn new(id: impl AsRef<str>) -> Result<Self, StorageError> {
        let id = id.as_ref();
        if id.is_empty() {
            return Err(StorageError::InvalidTaskId {
                id: String::new(),
                reason: "it is empty",
            });
        }
        if id.len() > MAX_ID_BYTES {
            return Err(StorageError::InvalidTaskId {
                id: preview(id),
                reason: "it is longer than 512 bytes",
            });
        }
        if id.contains('\0') {
            return Err(StorageError::InvalidTaskId {
                id: id.replace('\0', "\\0"),
                reason: "it contains a NUL byte",
            });
        }
        Ok(TaskId(Arc::from(id)))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn preview(id: &str) -> String {
    let mut end = 40.min(id.len());
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &id[..end], id.len())
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// Checks that a due time is representable (not beyond year 9999).
pub fn validate_due(due_ms: u64) -> Result<u64, StorageError> {
    if due_ms > MAX_DUE_MS {
        Err(StorageError::InvalidDue { due_ms })
    } else {
        Ok(due_ms)
    }
}

/// One partition of a queue: the unit of ownership, of prefetching and of atomicity
/// (all of a partition's keys share one Redis Cluster hash slot).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Partition {
    /// The queue.
    pub queue: QueueName,
    /// The partition's index, `0..partitions`.
    pub index: u32,
}

impl Partition {
    /// The partition `index` of `queue`.
    pub fn new(queue: QueueName, index: u32) -> Self {
        Partition { queue, index }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.queue, self.index)
    }
}

/// A task as a producer schedules it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTask {
    /// The task's id inside its queue.
    pub id: TaskId,
    /// When it is due, in milliseconds since the epoch on the cluster clock.
    pub due_ms: u64,
    /// Opaque bytes handed to the handler.
    pub payload: Bytes,
    /// The W3C trace context of the caller that scheduled it, if any: the fire's span links
    /// to it. Stored beside the task (55 bytes) and forgotten when the task completes, is
    /// cancelled or purged; a later schedule of the id replaces it (or drops it, without one).
    pub traceparent: Option<crate::TraceParent>,
}

/// What `schedule` does when the id already names a live task (`--mode` on the command line,
/// `"mode"` over HTTP).
///
/// For an id that has a **pending** task (also one waiting for a retry, whose due is then the
/// retry's time):
///
/// | mode | the live task | answer |
/// |---|---|---|
/// | [`Upsert`](Self::Upsert) (`replace`) | replaced by the new one (due and payload) | `Replaced` |
/// | [`IfAbsent`](Self::IfAbsent) | kept | `Kept` |
/// | [`Earlier`](Self::Earlier) | replaced when the new due is earlier, else kept | `Replaced` / `Kept` |
/// | [`Later`](Self::Later) | replaced when the new due is later, else kept | `Replaced` / `Kept` |
///
/// The payload goes with the due that wins; on a tie the live task is kept untouched. A
/// replaced task starts afresh (new generation, attempt 1, no error).
///
/// An id with **no live task** (never scheduled, completed, cancelled) is scheduled in every
/// mode. The executed-set applies first in every mode (guarantee 6): the same id and due
/// that completed within the retention is a `Duplicate`, and so is the same id and scheduled
/// due while that fire is running (except with `IfAbsent`, which answers `Kept`).
///
/// An id **in flight** (its handler is running): nothing ever stops or alters the running
/// attempt. `Upsert` arms the new schedule beside it (the running attempt's ack is then
/// superseded and no retry follows it); `IfAbsent` and `Earlier` keep it (a run already
/// under way is as early as a fire can be), answering `Kept` with the running attempt's due;
/// `Later` arms the new schedule as `Upsert` does when its due is later than the running
/// attempt's due, and keeps otherwise. (BullMQ and Asynq refuse a job id that is active;
/// `Later` departs from that because a deadline that only moves forward, e.g. a heartbeat
/// timeout, must not be lost while the previous deadline's handler runs.)
///
/// An id that is **dead** (attempts exhausted): `IfAbsent` keeps the dead letter (it stays
/// until retried or purged, as a BullMQ or Asynq job id stays taken); `Upsert`, `Earlier`
/// and `Later` treat a dead letter as no live task (it will never fire, so no due of its
/// can win): the new schedule replaces it (`Replaced`, with the dead letter's due) and the
/// dead letter is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ScheduleMode {
    /// `replace`: replace the existing task (its due, payload and attempt count); the default,
    /// and how a heartbeat pushes a deadline forward (a debounce).
    #[default]
    Upsert,
    /// `if_absent`: leave an existing pending, in-flight or dead task alone and report it as
    /// [`ScheduleOutcome::Kept`]: the first schedule wins (a throttle).
    IfAbsent,
    /// `earlier`: of a pending task's due and the new one, the earlier wins (with its
    /// payload); a task in flight is kept.
    Earlier,
    /// `later`: of a pending (or running) task's due and the new one, the later wins (with
    /// its payload).
    Later,
}

impl ScheduleMode {
    /// Every mode, in the order the documentation lists them.
    pub const ALL: [ScheduleMode; 4] = [
        ScheduleMode::Upsert,
        ScheduleMode::IfAbsent,
        ScheduleMode::Earlier,
        ScheduleMode::Later,
    ];

    /// The mode's name as users write it: `replace`, `if_absent`, `earlier`, `later`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleMode::Upsert => "replace",
            ScheduleMode::IfAbsent => "if_absent",
            ScheduleMode::Earlier => "earlier",
            ScheduleMode::Later => "later",
        }
    }

    /// Whether this mode keeps a live pending task due at `live_due_ms` against a new
    /// schedule due at `new_due_ms` (else the new one replaces it).
    pub fn keeps_pending(self, live_due_ms: u64, new_due_ms: u64) -> bool {
        match self {
            ScheduleMode::Upsert => false,
            ScheduleMode::IfAbsent => true,
            ScheduleMode::Earlier => new_due_ms >= live_due_ms,
            ScheduleMode::Later => new_due_ms <= live_due_ms,
        }
    }

    /// Whether this mode keeps a task in flight whose running attempt is due at
    /// `running_due_ms` against a new schedule due at `new_due_ms` (else the new one is
    /// armed beside the running attempt, as `Upsert` does).
    pub fn keeps_inflight(self, running_due_ms: u64, new_due_ms: u64) -> bool {
        match self {
            ScheduleMode::Upsert => false,
            ScheduleMode::IfAbsent | ScheduleMode::Earlier => true,
            ScheduleMode::Later => new_due_ms <= running_due_ms,
        }
    }
}

impl fmt::Display for ScheduleMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A schedule mode that is none of `replace`, `if_absent`, `earlier`, `later`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown schedule mode {0:?} (expected replace, if_absent, earlier or later)")]
pub struct UnknownScheduleMode(pub String);

impl std::str::FromStr for ScheduleMode {
    type Err = UnknownScheduleMode;

    /// Reads `replace` (or its older name `upsert`), `if_absent`, `earlier` or `later`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "replace" | "upsert" => Ok(ScheduleMode::Upsert),
            "if_absent" => Ok(ScheduleMode::IfAbsent),
            "earlier" => Ok(ScheduleMode::Earlier),
            "later" => Ok(ScheduleMode::Later),
            other => Err(UnknownScheduleMode(other.to_owned())),
        }
    }
}

/// What `schedule` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleOutcome {
    /// No live task had this id; a new pending task was stored.
    Created,
    /// A live task (pending, in flight or dead) had this id and was replaced.
    Replaced {
        /// The due time of the task that was replaced.
        previous_due_ms: u64,
    },
    /// The same id with the same due already fired within the executed retention; nothing
    /// was stored.
    Duplicate,
    /// The mode ([`ScheduleMode::IfAbsent`], [`ScheduleMode::Earlier`] or
    /// [`ScheduleMode::Later`]) kept the live task; it was left alone.
    Kept {
        /// The due time of the task that was kept.
        due_ms: u64,
    },
}

impl ScheduleOutcome {
    /// Whether a live task was replaced.
    pub fn replaced(&self) -> bool {
        matches!(self, ScheduleOutcome::Replaced { .. })
    }

    /// Whether the schedule was a duplicate of one that already fired.
    pub fn duplicate(&self) -> bool {
        matches!(self, ScheduleOutcome::Duplicate)
    }
}

/// Proof that a claimer holds a task's lease: a fencing token.
///
/// `claim` is unique per claim of the task, so a token from an earlier claim (a lease that
/// expired and was claimed again) is rejected by `ack`, `fail` and `renew`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    /// The task's partition.
    pub partition: Partition,
    /// The task's id.
    pub id: TaskId,
    /// The generation of the task that was claimed.
    pub generation: u64,
    /// The fencing number of this claim.
    pub claim: u64,
}

/// A task moved to in-flight by `claim_due`, ready for its handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedTask {
    /// The task's id.
    pub id: TaskId,
    /// The due time it was claimed for.
    pub due_ms: u64,
    /// 1 on the first delivery, +1 on each retry (a lease expiry does not count).
    pub attempt: u32,
    /// Bumped each time the id is scheduled; `(queue, id, generation)` is an idempotency key.
    pub generation: u64,
    /// The payload.
    pub payload: Bytes,
    /// The trace context the task was scheduled with, if any.
    pub traceparent: Option<crate::TraceParent>,
    /// The lease's fencing token, for `ack`, `fail` and `renew`.
    pub token: LeaseToken,
}

/// The result of `claim_due`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimBatch {
    /// The tasks now in flight, in due order.
    pub tasks: Vec<ClaimedTask>,
    /// The earliest due time still pending in the partition after the claim, if any.
    pub next_due_ms: Option<u64>,
    /// Due tasks whose record could not be decoded (written by outside tooling or by a newer
    /// release): the claim moved each to the dead letters with this reason instead of
    /// failing, so one bad record never blocks its partition (guarantee 8).
    pub dead_lettered: Vec<(TaskId, String)>,
    /// The queue is paused: nothing was claimed, and nothing will be until it is resumed
    /// (the caller waits for the resume instead of claiming again).
    pub paused: bool,
    /// The partition's tasks held back by their flow key's limits after the claim (0 on a
    /// queue without per-key limits): while some are, the end of a keyed task may let one
    /// back into the pending index, and the caller claims again.
    pub held_back: u64,
}

/// What `cancel` did (guarantee 7: `cancelled` is true only when a fire was prevented).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// A pending task (waiting for its due or for a retry) or a dead letter was removed.
    Cancelled,
    /// Its handler is running: a running attempt cannot be un-run. It finishes, no further
    /// attempt follows it (no retry), and the task is gone once it ended.
    InFlight,
    /// The id names no live task.
    NotFound,
}

impl Cancel {
    /// Whether a fire was prevented.
    pub fn cancelled(&self) -> bool {
        matches!(self, Cancel::Cancelled)
    }

    /// `"inflight"` when the handler was already running, else `None` (the CLI's and the
    /// HTTP API's `state` field).
    pub fn state(&self) -> Option<&'static str> {
        matches!(self, Cancel::InFlight).then_some("inflight")
    }
}

/// What `ack` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// The task was removed and recorded in the executed-set.
    Completed,
    /// The task was cancelled or scheduled again while its handler ran: the in-flight entry
    /// was dropped and the new schedule (if any) stands.
    Superseded,
}

/// What to do with a task whose handler failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailAction {
    /// Pending again at this time, with the attempt count increased by one.
    RetryAt(u64),
    /// Pending again at this time with the attempt count *unchanged*: the attempt never ran
    /// (the node lacked a resource to start the handler, such as a file descriptor or a
    /// process slot), so it is not the task's to pay for and can never dead-letter it. The
    /// error is kept as the last error, and the scheduled due stays the dedup key, as with
    /// [`FailAction::RetryAt`]; the outcome is [`FailOutcome::Retrying`] with the same
    /// attempt. Since nothing ran, a resend of the same id and due while it waits is what it
    /// would have been before the claim: a replacement on attempt 1, a duplicate on a later
    /// attempt (one did run).
    RequeueAt(u64),
    /// Move it to the dead letters.
    DeadLetter,
}

impl FailAction {
    /// The due time of a retry or requeue; `None` for a dead letter.
    pub fn due_ms(self) -> Option<u64> {
        match self {
            FailAction::RetryAt(due_ms) | FailAction::RequeueAt(due_ms) => Some(due_ms),
            FailAction::DeadLetter => None,
        }
    }
}

/// What `fail` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOutcome {
    /// Pending again (a retry, or a requeue that kept the attempt).
    Retrying {
        /// The attempt number of the next delivery.
        attempt: u32,
        /// When it is due again.
        due_ms: u64,
    },
    /// Dead-lettered.
    DeadLettered,
    /// The task was cancelled or scheduled again while its handler ran; the new schedule
    /// stands and the failure is not recorded.
    Superseded,
}

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for its due time (or due and not yet claimed).
    Pending,
    /// Claimed; a handler runs it under a lease.
    Inflight,
    /// Attempts exhausted.
    Dead,
    /// Completed, retained for dedup for `executed_retention`.
    Done,
}

impl TaskState {
    /// `pending`, `inflight`, `dead` or `done`.
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Inflight => "inflight",
            TaskState::Dead => "dead",
            TaskState::Done => "done",
        }
    }
}

/// A task as `get` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// The task's id.
    pub id: TaskId,
    /// Where it is.
    pub state: TaskState,
    /// Its due time (for `Done`: the due that fired).
    pub due_ms: u64,
    /// The attempt of the next (pending), current (in flight) or last (dead, done) delivery.
    pub attempt: u32,
    /// Its generation.
    pub generation: u64,
    /// The payload (empty for `Done`: completed tasks keep only what dedup needs).
    pub payload: Bytes,
    /// The last handler error, if an attempt failed.
    pub last_error: Option<String>,
    /// In flight: when the lease runs out. Dead: when it died. Done: when it completed.
    pub state_since_ms: Option<u64>,
    /// The trace context it was scheduled with, if any: the one its fire's span links to.
    /// `None` once it completed (a done task keeps no trace) or was cancelled while its
    /// handler ran.
    pub traceparent: Option<crate::TraceParent>,
}

/// A dead letter as `list_dead` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadTask {
    /// The task's id.
    pub id: TaskId,
    /// The due time of its last attempt.
    pub due_ms: u64,
    /// The number of attempts made.
    pub attempt: u32,
    /// When it was dead-lettered.
    pub failed_ms: u64,
    /// The last handler error.
    pub last_error: Option<String>,
    /// The payload.
    pub payload: Bytes,
}

/// Counts for one partition; add them up for a queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// Pending tasks (due now or later).
    pub pending: u64,
    /// Pending tasks with `due <= now`.
    pub due_now: u64,
    /// Tasks in flight.
    pub inflight: u64,
    /// Dead letters.
    pub dead: u64,
    /// Completed tasks retained for dedup.
    pub done: u64,
    /// Pending tasks held back by their flow key's limits (counted in `pending` and
    /// `due_now` too).
    pub held_back: u64,
}

impl std::ops::AddAssign for PartitionStats {
    fn add_assign(&mut self, other: Self) {
        self.pending += other.pending;
        self.due_now += other.due_now;
        self.inflight += other.inflight;
        self.dead += other.dead;
        self.done += other.done;
        self.held_back += other.held_back;
    }
}

/// Limits and retention shared by every backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// The largest payload accepted, in bytes (default 1 MiB).
    pub max_payload: usize,
    /// How long a completed `(id, due)` is kept for dedup, in milliseconds (default 1 h).
    pub executed_retention_ms: u64,
    /// The most payload bytes one `claim_due` returns (default 8 MiB): a claim stops adding
    /// tasks once it has this many, but always returns at least one due task. It keeps 256
    /// tasks of 1 MiB from becoming one reply of 256 MiB that stalls Redis and the node.
    pub max_claim_bytes: usize,
}

/// The default of [`StoreOptions::max_claim_bytes`]: 8 MiB.
pub const DEFAULT_MAX_CLAIM_BYTES: usize = 8 * 1024 * 1024;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_payload: DEFAULT_MAX_PAYLOAD,
            executed_retention_ms: 3_600_000,
            max_claim_bytes: DEFAULT_MAX_CLAIM_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_the_design() {
        assert!(QueueName::new("a").is_ok());
        assert!(QueueName::new("A-z_0.9").is_ok());
        assert!(QueueName::new("x".repeat(64)).is_ok());
        for bad in ["", "a{b", "a}b", "a:b", "a b", "é", "queue/1"] {
            let error = QueueName::new(bad).expect_err(bad);
            assert!(
                matches!(error, StorageError::InvalidQueueName { ref name, .. } if name == bad),
                "{error}"
            );
        }
        assert!(QueueName::new("x".repeat(65)).is_err());
    }

    #[test]
    fn task_ids_are_1_to_512_bytes() {
        assert!(TaskId::new("x".repeat(512)).is_ok());
        assert!(TaskId::new("é".repeat(256)).is_ok());
        let error = TaskId::new("é".repeat(257)).expect_err("514 bytes");
        assert!(error.to_string().contains("512"), "{error}");
        assert!(TaskId::new("").is_err());
        let error = TaskId::new("a\0b").expect_err("NUL");
        assert!(error.to_string().contains("NUL"), "{error}");
        assert!(
            matches!(&error, StorageError::InvalidTaskId { id, .. } if id == "a\\0b"),
            "{error}"
        );
    }

    #[test]
    fn due_beyond_year_9999_is_rejected() {
        assert!(validate_due(MAX_DUE_MS).is_ok());
        assert!(matches!(
            validate_due(MAX_DUE_MS + 1),
            Err(StorageError::InvalidDue { .. })
        ));
    }
}

/// What an owner's look at one of its partitions asks for ([`TaskStore::look`]): the periodic
/// pull and the lease sweep in one call, so that an idle partition costs one call per look.
///
/// [`TaskStore::look`]: crate::TaskStore::look
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookRequest {
    /// The caller's cluster-clock time. Leases are judged by it (the Redis backend by
    /// `min(now_ms, Redis TIME)`, guarantee 9).
    pub now_ms: u64,
    /// The end of the prefetch window: pending tasks due at or before it are returned.
    pub window_end_ms: u64,
    /// The most window entries returned.
    pub window_limit: usize,
    /// The most expired leases put back as pending by this look.
    pub requeue_limit: usize,
    /// Completed records older than this are forgotten (up to `prune_limit`); `None` prunes
    /// nothing.
    pub prune_before_ms: Option<u64>,
    /// The most completed records one look forgets.
    pub prune_limit: usize,
}

/// What a look found ([`TaskStore::look`]): enough for the owner to know when it must look
/// again.
///
/// [`TaskStore::look`]: crate::TaskStore::look
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LookReport {
    /// In-flight tasks whose lease had run out, now pending again at `now_ms` (same attempt,
    /// as [`TaskStore::requeue_expired`](crate::TaskStore::requeue_expired) does).
    pub requeued: Vec<TaskId>,
    /// How many completed records were forgotten.
    pub pruned: u64,
    /// Up to `window_limit` `(id, due)` pairs of pending tasks due at or before the end of
    /// the window (requeued ones included), in due order.
    pub window: Vec<(TaskId, u64)>,
    /// The earliest due of a pending task after the window, when the window was not full.
    pub next_due_after_window_ms: Option<u64>,
    /// The earliest lease deadline of a task still in flight after the sweep.
    pub earliest_lease_deadline_ms: Option<u64>,
}
