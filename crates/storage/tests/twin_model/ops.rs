//! The operations the model draws, over a small universe, and the strategies that draw them.
//!
//! Every choice is a small number resolved against the universe when the operation runs
//! (`queue % queues`, `id % ids` of the universe, `lease % leases held`), so any subsequence of a
//! sequence is still a valid sequence: that is what lets proptest shrink by dropping
//! operations, and shrink each number towards 0, without preconditions.

use delayq_storage::{FlowLimits, KeyRate, ScheduleMode};
use proptest::collection::vec;
use proptest::prelude::*;

/// The fixed point in time that logical times are counted from (2023-11-14, like the
/// conformance suite's `T0`). It is in the past of the Redis clock, so the Redis backend's
/// own checks against `TIME` (a claim never takes a task due after `min(now, TIME)`, a lease
/// is judged at `min(now, TIME)`) always let the logical `now` decide, as in the memory store.
pub const BASE: u64 = 1_700_000_000_000;

/// One step of logical time, in ms: dues, leases and `now` move in slots, so that equal dues
/// (ties, `earlier`/`later` keeping, dedup of the same due) happen often.
pub const SLOT: u64 = 10;

/// The slot that `now` starts at: dues of slots below it are already due.
pub const START_SLOT: u64 = 6;

/// The largest due slot drawn.
pub const MAX_DUE_SLOT: u8 = 16;

/// The task ids of every queue.
pub const IDS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// The task ids of every queue in a universe with flow keys: four of key `k1`, three of
/// `k2`, one of `k3`, and two without a key (`w{}{k1}` has none: its first braces are
/// empty).
pub const FLOW_IDS: [&str; 10] = [
    "a{k1}", "b{k1}", "c{k1}:3", "{k1}d", "{k2}e", "f{k2}", "g{k2}h", "x{k3}", "u", "w{}{k1}",
];

/// `max_payload` of both stores.
pub const MAX_PAYLOAD: usize = 40;

/// The payloads drawn: empty, small, exactly `max_payload`, and one byte too large.
pub const PAYLOADS: [&str; 5] = [
    "",
    "p",
    "sixteen byte pay",
    "forty bytes of payload, exactly forty.!!",
    "forty-one bytes of payload: one too many!",
];

/// The owners (nodes) that claim.
pub const OWNERS: [&str; 2] = ["node-0", "node-1"];

/// What a case's stores are made of: the queues with their partition counts, and the options
/// both stores get.
#[derive(Clone, Debug)]
pub struct Universe {
    /// Partition counts of the queues `q0`, `q1`, ...
    pub partitions: Vec<u32>,
    /// `executed_retention` (0 turns dedup and done records off).
    pub retention_ms: u64,
    /// `max_claim_bytes`.
    pub max_claim_bytes: usize,
    /// With flow keys: every queue is registered with `flow_keys: true`, both stores claim
    /// with these per-key limits, and the ids are [`FLOW_IDS`]; without, [`IDS`].
    pub flow: Option<FlowLimits>,
}

impl Universe {
    /// The task ids of every queue.
    pub fn ids(&self) -> &'static [&'static str] {
        match self.flow {
            Some(_) => &FLOW_IDS,
            None => &IDS,
        }
    }
}

/// A due time as drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// `BASE + slot * SLOT`.
    Slot(u8),
    /// Beyond the year 9999: `InvalidDue`.
    Invalid,
}

/// A task as drawn: indexes into the universe's ids ([`Universe::ids`]) and [`PAYLOADS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    /// Index into the universe's ids.
    pub id: u8,
    /// Its due.
    pub due: Due,
    /// Index into [`PAYLOADS`].
    pub payload: u8,
}

/// Which partition an operation works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The partition of `queue` that the universe's id `n` routes to (where the tasks are).
    OfId { queue: u8, id: u8 },
    /// Partition `n % partitions` of `queue`.
    Index { queue: u8, index: u8 },
    /// The partition of a lease handed out earlier (where something was claimed), or of
    /// `q0`'s partition 0 when none was.
    OfLease(u8),
    /// The partition of the n-th most recent task scheduled (0: the latest), or of `q0`'s
    /// partition 0 when none was.
    Recent(u8),
}

/// Which task an operation names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskRef {
    /// The universe's id `id` in `queue`.
    Id { queue: u8, id: u8 },
    /// The task of a lease handed out earlier (one that was claimed, so maybe dead, done,
    /// waiting for a retry or still running), or `a` of `q0` when none was.
    OfLease(u8),
    /// The n-th most recent task scheduled (0: the latest), or `a` of `q0` when none was.
    Recent(u8),
}

/// What `fail` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// `RetryAt(now + slots * SLOT)`.
    In(u8),
    /// `RetryAt` beyond the year 9999.
    Invalid,
    /// `DeadLetter`.
    Dead,
    /// `RequeueAt(now + slots * SLOT)`: put back without spending the attempt.
    Requeue(u8),
}

/// One operation of a sequence. `queue` and `id` are taken modulo the universe, `lease`
/// modulo the leases handed out so far (an operation on a lease when none was handed out is
/// skipped, on both stores alike).
#[derive(Clone, Debug)]
pub enum Op {
    /// `schedule` of one task.
    Schedule {
        queue: u8,
        task: TaskSpec,
        mode: ScheduleMode,
    },
    /// `schedule` of a task again with the due it was last scheduled with (a producer's
    /// resend: dedup while it runs, waits for a retry, is dead or done), or slot 0.
    Resend {
        task: TaskRef,
        payload: u8,
        mode: ScheduleMode,
    },
    /// `schedule_many` of tasks of any queues.
    ScheduleMany {
        items: Vec<(u8, TaskSpec)>,
        mode: ScheduleMode,
    },
    /// `cancel`.
    Cancel { task: TaskRef },
    /// `get`.
    Get { task: TaskRef },
    /// `claim_due` at `now` with a lease of `lease_slots`; its tasks' leases are kept.
    Claim {
        at: Target,
        limit: u8,
        lease_slots: u8,
        owner: u8,
    },
    /// `recover_claim` with the owner and lease deadline of a lease's claim (or another
    /// owner's name).
    RecoverClaim { lease: u8, same_owner: bool },
    /// `ack` of a lease handed out earlier (possibly stale by now).
    Ack { lease: u8 },
    /// `fail` of a lease handed out earlier.
    Fail { lease: u8, retry: Retry },
    /// `renew` of a lease handed out earlier, until `now + slots * SLOT`.
    Renew { lease: u8, slots: u8 },
    /// Moves the logical `now` forward.
    Advance { slots: u8 },
    /// `requeue_expired` at `now`.
    RequeueExpired { at: Target, limit: u8 },
    /// `look` at `now`, with a window to `now + window_slots * SLOT`, pruning the done
    /// records completed before operation `prune` when given.
    Look {
        at: Target,
        window_slots: u8,
        window_limit: u8,
        requeue_limit: u8,
        prune: Option<u8>,
        prune_limit: u8,
    },
    /// `peek_window` between two slots.
    PeekWindow {
        at: Target,
        from: u8,
        to: u8,
        limit: u8,
    },
    /// `retry_dead`.
    RetryDead { task: TaskRef, due: Due },
    /// `purge_dead` of one task.
    PurgeDeadOne { task: TaskRef },
    /// `purge_dead` of a whole partition.
    PurgeDeadAll { at: Target },
    /// `prune_done` of the records completed before operation `before` (modulo the
    /// operations run so far, the current one included).
    PruneDone { at: Target, before: u8, limit: u8 },
    /// `stats` at `now`.
    Stats { at: Target },
    /// `list_dead`.
    ListDead { at: Target, limit: u8 },
    /// `peek_dead`.
    PeekDead { at: Target, limit: u8 },
    /// `set_paused`.
    SetPaused { queue: u8, paused: bool },
    /// `register_queue` again, with any count (a mismatch, or 0, is an error).
    Register { queue: u8, partitions: u8 },
}

fn mode() -> impl Strategy<Value = ScheduleMode> {
    prop::sample::select(ScheduleMode::ALL.to_vec())
}

fn due() -> impl Strategy<Value = Due> {
    prop_oneof![
        30 => (0..=MAX_DUE_SLOT).prop_map(Due::Slot),
        1 => Just(Due::Invalid),
    ]
}

fn task(ids: u8) -> impl Strategy<Value = TaskSpec> {
    let payload = prop_oneof![
        10 => 0..4u8,
        1 => Just(4u8),
    ];
    (0..ids, due(), payload).prop_map(|(id, due, payload)| TaskSpec { id, due, payload })
}

fn target(ids: u8) -> impl Strategy<Value = Target> {
    prop_oneof![
        2 => (0..2u8, 0..ids).prop_map(|(queue, id)| Target::OfId { queue, id }),
        1 => (0..2u8, 0..4u8).prop_map(|(queue, index)| Target::Index { queue, index }),
        3 => any::<u8>().prop_map(Target::OfLease),
        4 => (0..8u8).prop_map(Target::Recent),
    ]
}

fn task_ref(ids: u8) -> impl Strategy<Value = TaskRef> {
    prop_oneof![
        2 => (0..2u8, 0..ids).prop_map(|(queue, id)| TaskRef::Id { queue, id }),
        2 => any::<u8>().prop_map(TaskRef::OfLease),
        2 => (0..8u8).prop_map(TaskRef::Recent),
    ]
}

/// A task, mostly one that was claimed (dead letters come from claims).
fn leased_task(ids: u8) -> impl Strategy<Value = TaskRef> {
    prop_oneof![
        1 => task_ref(ids),
        3 => any::<u8>().prop_map(TaskRef::OfLease),
    ]
}

fn retry() -> impl Strategy<Value = Retry> {
    prop_oneof![
        8 => (0..6u8).prop_map(Retry::In),
        6 => Just(Retry::Dead),
        1 => Just(Retry::Invalid),
        3 => (0..6u8).prop_map(Retry::Requeue),
    ]
}

/// A small count: a limit of 1 to 4.
fn limit() -> impl Strategy<Value = u8> {
    1..=4u8
}

/// One operation over `ids` task ids, weighted towards the ones that move tasks between
/// states.
pub fn op(ids: u8) -> impl Strategy<Value = Op> {
    let queue = || 0..2u8;
    let lease = any::<u8>;
    prop_oneof![
        12 => (queue(), task(ids), mode()).prop_map(|(queue, task, mode)| Op::Schedule { queue, task, mode }),
        4 => (task_ref(ids), 0..4u8, mode()).prop_map(|(task, payload, mode)| Op::Resend { task, payload, mode }),
        3 => (vec((queue(), task(ids)), 1..4), mode()).prop_map(|(items, mode)| Op::ScheduleMany { items, mode }),
        4 => task_ref(ids).prop_map(|task| Op::Cancel { task }),
        2 => task_ref(ids).prop_map(|task| Op::Get { task }),
        10 => (target(ids), limit(), prop_oneof![2 => Just(0u8), 2 => Just(1), 1 => Just(3), 1 => Just(100)], 0..2u8)
            .prop_map(|(at, limit, lease_slots, owner)| Op::Claim { at, limit, lease_slots, owner }),
        1 => (lease(), any::<bool>()).prop_map(|(lease, same_owner)| Op::RecoverClaim { lease, same_owner }),
        6 => lease().prop_map(|lease| Op::Ack { lease }),
        5 => (lease(), retry()).prop_map(|(lease, retry)| Op::Fail { lease, retry }),
        2 => (lease(), 0..6u8).prop_map(|(lease, slots)| Op::Renew { lease, slots }),
        8 => (1..=6u8).prop_map(|slots| Op::Advance { slots }),
        4 => (target(ids), limit()).prop_map(|(at, limit)| Op::RequeueExpired { at, limit }),
        4 => (target(ids), 0..8u8, limit(), limit(), prop::option::of(any::<u8>()), limit())
            .prop_map(|(at, window_slots, window_limit, requeue_limit, prune, prune_limit)| Op::Look {
                at, window_slots, window_limit, requeue_limit, prune, prune_limit,
            }),
        1 => (target(ids), 0..=MAX_DUE_SLOT, 0..=MAX_DUE_SLOT, limit())
            .prop_map(|(at, from, to, limit)| Op::PeekWindow { at, from, to, limit }),
        3 => (leased_task(ids), due()).prop_map(|(task, due)| Op::RetryDead { task, due }),
        1 => leased_task(ids).prop_map(|task| Op::PurgeDeadOne { task }),
        1 => target(ids).prop_map(|at| Op::PurgeDeadAll { at }),
        2 => (target(ids), any::<u8>(), limit()).prop_map(|(at, before, limit)| Op::PruneDone { at, before, limit }),
        1 => target(ids).prop_map(|at| Op::Stats { at }),
        1 => (target(ids), limit()).prop_map(|(at, limit)| Op::ListDead { at, limit }),
        1 => (target(ids), limit()).prop_map(|(at, limit)| Op::PeekDead { at, limit }),
        1 => (queue(), prop::bool::weighted(0.3)).prop_map(|(queue, paused)| Op::SetPaused { queue, paused }),
        1 => (queue(), 0..=4u8).prop_map(|(queue, partitions)| Op::Register { queue, partitions }),
    ]
}

/// A universe: one or two queues of one to four partitions, dedup on or off, a claim byte
/// budget that bites or not.
pub fn universe() -> impl Strategy<Value = Universe> {
    (
        vec(1..=4u32, 1..=2),
        prop_oneof![3 => Just(3_600_000u64), 1 => Just(0u64)],
        prop_oneof![3 => Just(delayq_storage::DEFAULT_MAX_CLAIM_BYTES), 1 => Just(48usize)],
    )
        .prop_map(|(partitions, retention_ms, max_claim_bytes)| Universe {
            partitions,
            retention_ms,
            max_claim_bytes,
            flow: None,
        })
}

/// A case: a universe and up to `max_ops` operations.
pub fn case(max_ops: usize) -> impl Strategy<Value = (Universe, Vec<Op>)> {
    (universe(), vec(op(IDS.len() as u8), 1..=max_ops.max(1)))
}

/// Per-key limits: a concurrency of 1 to 3 (or none), optionally a rate of 1 or 2 fires per
/// 20 or 50 ms of the logical clock, optionally FIFO order.
fn flow_limits() -> impl Strategy<Value = FlowLimits> {
    let rate = (1..=2u32, prop::sample::select(vec![20u64, 50]))
        .prop_map(|(limit, period_ms)| KeyRate { limit, period_ms });
    (
        prop_oneof![4 => (1..=3u32).prop_map(Some), 1 => Just(None)],
        prop::option::weighted(0.5, rate),
        prop::bool::weighted(0.4),
    )
        .prop_map(|(concurrency, rate, fifo)| FlowLimits {
            concurrency,
            rate,
            fifo,
        })
}

/// A case on queues with flow keys: a universe as [`universe`] draws it with per-key limits,
/// and up to `max_ops` operations over [`FLOW_IDS`].
pub fn flow_case(max_ops: usize) -> impl Strategy<Value = (Universe, Vec<Op>)> {
    (
        universe(),
        flow_limits(),
        vec(op(FLOW_IDS.len() as u8), 1..=max_ops.max(1)),
    )
        .prop_map(|(universe, limits, ops)| {
            let flow = Some(limits);
            (Universe { flow, ..universe }, ops)
        })
}
