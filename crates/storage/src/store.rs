//! The [`TaskStore`] trait: what every backend offers, with the semantics of DESIGN.md.

use async_trait::async_trait;

use crate::error::StorageResult;
use crate::flow::{FlowLimits, HeldKey, QueueLayout};
use crate::model::{
    AckOutcome, Cancel, ClaimBatch, DeadTask, FailAction, FailOutcome, LeaseToken, LookReport,
    LookRequest, NewTask, Partition, PartitionStats, QueueName, ScheduleMode, ScheduleOutcome,
    TaskId, TaskInfo,
};
use crate::recurring::RecurringStore;

/// The outcome of one item of [`TaskStore::schedule_many`], in the order given.
pub type ItemResult = StorageResult<ScheduleOutcome>;

/// A task store: the pending, in-flight, done and dead tasks of every queue partition.
///
/// # Why a trait object
/// The trait is object-safe (through `async_trait`) so that the engine, the command line and
/// tests hold an `Arc<dyn TaskStore>` and choose the Redis or the memory backend at run time
/// (`delayq demo` vs `delayq node`) without making every type generic. The price, one boxed
/// future per call, is noise next to a network round trip.
///
/// # Time
/// Due times, `now` and lease deadlines are milliseconds since the Unix epoch on the cluster
/// clock, passed in by the caller. The only times a backend takes itself are `completed_ms`
/// and `failed_ms` stamps and the age check of dedup (the Redis backend reads Redis `TIME`,
/// which *is* the cluster clock; the memory backend reads its own clock).
///
/// # Life of a task
/// ```text
///  schedule ──> pending ──claim_due──> inflight ──ack──> done (retained, payload dropped)
///                  ^  ^                  │  │
///                  │  └── requeue_expired┘  └─fail(RetryAt)──> pending (attempt + 1)
///                  │      (lease ran out,     fail(RequeueAt)> pending (same attempt)
///                  │       same attempt)      fail(DeadLetter)─> dead ──retry_dead──┐
///                  │                                                                │
///                  └────────────────────────────────────────────────────────────────┘
/// ```
/// `cancel` removes a pending or dead task; a task in flight is marked so that its running
/// attempt is the last one (its `ack`/`fail` report `Superseded` and forget it). Scheduling an
/// id again replaces whatever live task it names (upsert) and bumps its generation; if that
/// task was in flight, its handler's `ack`/`fail` reports `Superseded` and the new schedule
/// stands, unless the new schedule has the same due as the running one: that is a resend of
/// the fire in progress, reported as `Duplicate` (guarantee 6).
///
/// Every store also keeps recurring schedules and the tick ledger ([`RecurringStore`]).
#[async_trait]
pub trait TaskStore: RecurringStore + Send + Sync + 'static {
    /// Records the number of partitions of `queue` the first time it is used and returns it;
    /// afterwards fails with `PartitionMismatch` when `partitions` differs from the record.
    /// A new queue is registered without flow keys ([`register_layout`](TaskStore::register_layout)
    /// with `None`).
    async fn register_queue(&self, queue: &QueueName, partitions: u32) -> StorageResult<u32> {
        Ok(self
            .register_layout(queue, partitions, None)
            .await?
            .partitions)
    }

    /// Records the layout of `queue` the first time it is used (`flow_keys: None` registers a
    /// new queue without flow keys) and returns the recorded one. Afterwards fails with
    /// `PartitionMismatch` when `partitions` differs from the record, and with
    /// `FlowKeysMismatch` when `flow_keys` is `Some` and differs from it (a queue registered
    /// by a release before flow keys has none). Nothing is written then.
    async fn register_layout(
        &self,
        queue: &QueueName,
        partitions: u32,
        flow_keys: Option<bool>,
    ) -> StorageResult<QueueLayout>;

    /// The queues the store knows, with their partition counts, sorted by name.
    async fn queues(&self) -> StorageResult<Vec<(QueueName, u32)>> {
        Ok(self
            .queue_layouts()
            .await?
            .into_iter()
            .map(|(queue, layout)| (queue, layout.partitions))
            .collect())
    }

    /// The queues the store knows, with their layouts, sorted by name.
    async fn queue_layouts(&self) -> StorageResult<Vec<(QueueName, QueueLayout)>>;

    /// The per-key limits that this store's claims of `queue` apply from now on (each node's
    /// own configuration, as for the queue-wide limits); [`FlowLimits::default`] turns them
    /// off. Fails with `FlowKeysRequired` when limits are set for a queue registered without
    /// flow keys, and `InvalidFlowLimits` for a zero limit. Tasks already holding or parked
    /// keep their places: a slot freed later releases the next parked task as before.
    async fn set_flow_limits(&self, queue: &QueueName, limits: FlowLimits) -> StorageResult<()>;

    /// Up to `limit` keys of `partition` holding tasks back, those with the most waiting
    /// first (ties: by key). Reads only.
    async fn held_keys(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<HeldKey>>;

    /// Schedules one task in `partition` (which must be `partition_of(task.id, partitions)`;
    /// the caller routes).
    ///
    /// - Upsert: a live task with the same id is replaced (due, payload, attempt back to 1,
    ///   generation + 1).
    /// - IfAbsent: a live task with the same id is kept and reported.
    /// - Dedup: if the id completed within the executed retention *with the same due*, or is
    ///   in flight (its handler running) for that same due, nothing is stored and `Duplicate`
    ///   is returned; a different due re-arms the id. A retention of 0 turns dedup off.
    ///
    /// Fails with `PayloadTooLarge` or `InvalidDue` before anything is written.
    async fn schedule(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome>;

    /// Schedules many tasks in pipelined batches (the bulk-load path). The result has one entry
    /// per item, in order: an invalid item fails alone and the others are stored; when the
    /// connection is lost mid-batch, the items whose fate is unknown carry the error (retrying
    /// them is safe: a schedule is an upsert).
    async fn schedule_many(
        &self,
        items: Vec<(Partition, NewTask)>,
        mode: ScheduleMode,
    ) -> StorageResult<Vec<ItemResult>>;

    /// Cancels a task (guarantee 7). A pending task (also one waiting for a retry) or a dead
    /// letter is removed: [`Cancel::Cancelled`]. A task whose handler runs cannot be un-run:
    /// [`Cancel::InFlight`]; the running attempt finishes, its `ack`/`fail` report
    /// `Superseded` and remove the task (no retry, no done record), and a lapsed lease drops it
    /// instead of requeueing it. An unknown id: [`Cancel::NotFound`].
    async fn cancel(&self, partition: &Partition, id: &TaskId) -> StorageResult<Cancel>;

    /// The task with this id: pending, in flight, dead, or done within the retention.
    async fn get(&self, partition: &Partition, id: &TaskId) -> StorageResult<Option<TaskInfo>>;

    /// Atomically moves up to `limit` pending tasks with `due <= now_ms` (oldest due first) to
    /// in-flight with the given lease deadline, and returns them with their payloads and fresh
    /// fencing tokens, plus the earliest due still pending. Concurrent claimers never receive
    /// the same task.
    ///
    /// - A claim returns at most [`StoreOptions::max_claim_bytes`](crate::StoreOptions) of
    ///   payload (but at least one due task).
    /// - A due record that cannot be decoded is moved to the dead letters with the reason and
    ///   reported in [`ClaimBatch::dead_lettered`]; the others are claimed (guarantee 8).
    /// - The Redis backend never takes a task before its due on Redis `TIME`, whatever
    ///   `now_ms` says (guarantee 9).
    /// - The claim leaves a receipt, so that [`recover_claim`](TaskStore::recover_claim) can
    ///   return the same tasks when the reply was lost.
    async fn claim_due(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<ClaimBatch>;

    /// The tasks of the latest claim of `partition`, when that claim was made by `owner` with
    /// `lease_deadline_ms` and its reply never arrived (a response timeout, a connection
    /// reset): those of its tasks still in flight under that very claim, with the tokens the
    /// lost reply carried. Empty when the claim never ran, when another claim of the partition
    /// came since (then the tasks come back through lease expiry), or when everything was
    /// requeued, acked or cancelled meanwhile. Without it a lost reply would park up to
    /// `claim_batch` tasks in flight, with no handler, for a whole lease.
    async fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> StorageResult<ClaimBatch>;

    /// The `(id, due)` pairs of up to `limit` pending tasks with `from_ms <= due <= to_ms`,
    /// in due order, for prefetching. Reads only; claims nothing.
    async fn peek_window(
        &self,
        partition: &Partition,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>>;

    /// The earliest due of a pending task of `partition` (`None`: nothing pending): an idle
    /// partition's light look. Reads only.
    ///
    /// A backend may answer from a view of many partitions read together, up to a few
    /// seconds old, so that an idle fleet does not pay one statement per partition per look
    /// (the PostgreSQL backend does, see
    /// [`HEAD_VIEW_MAX_AGE`](crate::HEAD_VIEW_MAX_AGE)); the engine uses the answer
    /// only to plan the next look, and wake-ups announce new tasks either way. The default
    /// reads [`peek_window`](TaskStore::peek_window) at once.
    async fn pending_head(&self, partition: &Partition) -> StorageResult<Option<u64>> {
        let head = self
            .peek_window(partition, 0, crate::model::MAX_DUE_MS, 1)
            .await?;
        Ok(head.first().map(|(_, due)| *due))
    }

    /// The owner's look at `partition`: puts back up to `requeue_limit` expired leases (as
    /// [`requeue_expired`](TaskStore::requeue_expired)), forgets old completed records when
    /// asked (as [`prune_done`](TaskStore::prune_done)), and reads the pending tasks of the
    /// prefetch window (as [`peek_window`](TaskStore::peek_window) from 0), the earliest due
    /// after the window and the earliest lease deadline still in flight — in one call, so an
    /// idle partition costs its owner one round trip per look. Claims nothing.
    async fn look(&self, partition: &Partition, request: &LookRequest)
        -> StorageResult<LookReport>;

    /// The handler succeeded: removes the task and records `(id, due)` in the executed-set,
    /// unless it was cancelled or scheduled again meanwhile (`Superseded`). A stale token
    /// fails with `StaleLease` and changes nothing.
    async fn ack(&self, token: &LeaseToken) -> StorageResult<AckOutcome>;

    /// The handler failed: keep `error` as the task's last error and either make it pending
    /// again at the given time with attempt + 1 ([`FailAction::RetryAt`]), or with the same
    /// attempt when the attempt never ran ([`FailAction::RequeueAt`]: the node lacked a
    /// resource to start the handler), or dead-letter it. A stale token fails with
    /// `StaleLease` and changes nothing.
    async fn fail(
        &self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
    ) -> StorageResult<FailOutcome>;

    /// Extends the lease of a running task. A stale token fails with `StaleLease`.
    async fn renew(&self, token: &LeaseToken, lease_deadline_ms: u64) -> StorageResult<()>;

    /// Puts back up to `limit` in-flight tasks whose lease ran out before `now_ms` as pending,
    /// due at once, *without* spending an attempt (a crashed node is not the task's fault).
    /// Returns the ids put back. A task cancelled while in flight is dropped instead. The
    /// Redis backend judges leases by `min(now_ms, Redis TIME)`, so a node whose clock jumped
    /// ahead never expires a healthy handler's lease (guarantee 9).
    async fn requeue_expired(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<TaskId>>;

    /// Forgets up to `limit` completed tasks that completed before `older_than_ms`. Returns how
    /// many were pruned.
    async fn prune_done(
        &self,
        partition: &Partition,
        older_than_ms: u64,
        limit: usize,
    ) -> StorageResult<u64>;

    /// Counts for one partition (`due_now` counts pending tasks with `due <= now_ms`).
    async fn stats(&self, partition: &Partition, now_ms: u64) -> StorageResult<PartitionStats>;

    /// Up to `limit` dead letters of a partition, oldest first, with their records (payloads
    /// included). To list a queue, [`peek_dead`](TaskStore::peek_dead) its partitions first
    /// and read only the records shown.
    async fn list_dead(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<DeadTask>>;

    /// The `(id, failed_ms)` pairs of up to `limit` dead letters of a partition, oldest
    /// first (ties by id), without their records: what a listing of many partitions reads
    /// before it fetches the records it shows. Reads only.
    async fn peek_dead(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>>;

    /// Makes a dead letter pending again at `due_ms` with attempt 1. Returns whether it was
    /// dead.
    async fn retry_dead(
        &self,
        partition: &Partition,
        id: &TaskId,
        due_ms: u64,
    ) -> StorageResult<bool>;

    /// Pauses or resumes `queue` (of `partitions` partitions) cluster-wide (guarantee 11).
    /// Once `set_paused(.., true)` returned, no `claim_due` of the queue claims anything (it
    /// answers [`ClaimBatch::paused`](crate::ClaimBatch)); schedules, cancels and dead-letter
    /// operations go on. Idempotent.
    async fn set_paused(
        &self,
        queue: &QueueName,
        partitions: u32,
        paused: bool,
    ) -> StorageResult<()>;

    /// The paused queues, with the time each was paused (ms since the epoch).
    async fn paused_queues(&self) -> StorageResult<Vec<(QueueName, u64)>>;

    /// Takes up to `wanted` of the `limit` fire tokens of `queue`'s cluster-wide rate window
    /// that starts at `window_start_ms` and lasts `period_ms` (`rate_limit`); returns how many
    /// were granted, 0 when the window is used up. The grants of one window never add up to
    /// more than `limit`, whichever nodes ask.
    async fn take_rate_tokens(
        &self,
        queue: &QueueName,
        window_start_ms: u64,
        period_ms: u64,
        limit: u64,
        wanted: u64,
    ) -> StorageResult<u64>;

    /// Grants `node` up to `wanted` of `queue`'s `limit` cluster-wide handler slots
    /// (`global_concurrency`), so that all holders together hold at most `limit`; a holder
    /// whose lease (renewed by every call, `lease_ms` long) ran out is dropped first, so a
    /// dead node's slots come back. `wanted` 0 only renews. Returns the slots granted.
    async fn acquire_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        limit: u64,
        wanted: u64,
        lease_ms: u64,
    ) -> StorageResult<u64>;

    /// Gives back `count` of `node`'s global slots of `queue`.
    async fn release_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        count: u64,
    ) -> StorageResult<()>;

    /// Deletes dead letters: one id, or all of the partition with `None`. Returns how many.
    async fn purge_dead(&self, partition: &Partition, id: Option<&TaskId>) -> StorageResult<u64>;

    /// Deletes the whole of `queue` (of `partitions` partitions): every task of every
    /// partition (pending, in flight, dead, done), its pause flag and tick ledger, and its
    /// entry in the registry (so [`queues`](TaskStore::queues) no longer lists it) and among
    /// the paused queues. Returns the tasks removed: pending + in flight + dead. The Redis
    /// backend removes every key with the queue's tag on every master (the partitions by name,
    /// then a `SCAN` of `<prefix>:{<queue>:*` per master) and the registry entries last.
    ///
    /// It does not check whether the queue holds tasks (the caller decides) and does not fence
    /// concurrent writers: a schedule that lands after its partition was deleted stays (and
    /// one that registers the queue again re-creates it). A handler running a deleted task
    /// finds its `ack`/`fail` stale or superseded. Idempotent: an unknown queue removes 0.
    async fn delete_queue(&self, queue: &QueueName, partitions: u32) -> StorageResult<u64>;
}
