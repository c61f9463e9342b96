//! One owned partition: its looks (prefetch, lease sweep, pruning, in one store call) and
//! its claims.
//!
//! # How often a partition is looked at
//! A partition with something due within `prefetch_window` or something in flight is *busy*:
//! its owner looks at it every `pull_period` (the safety net behind the wake-ups and the
//! timer). Once [`LOOKS_BEFORE_IDLE`] looks in a row found nothing due within the window and
//! nothing in flight, it is *idle*: the next look comes after `idle_pull_period` (plus up to
//! half of it at random, so that thousands of idle partitions do not look in step), but never
//! later than its next pending due minus `prefetch_window` (each look learns that due). It is
//! busy again at once when it has work: a wake-up or the owner's own schedule
//! ([`PartitionWorker::wake`], [`PartitionWorker::expect`]), a timer entry, a look that finds
//! something. An idle look is light: one plain read of the earliest pending due (nothing is
//! in flight in an idle partition, so there is nothing to sweep); every [`FULL_LOOK_EVERY`]th
//! is a full look (`look.lua`: sweep, pruning, window). So an idle cluster costs Redis about
//! one command per partition per idle period. On PostgreSQL, where a statement is a
//! transaction, the light looks of a node share one statement that reads the heads of all its
//! idle partitions at most every `HEAD_VIEW_MAX_AGE` (5 s; `TaskStore::pending_head`), so the
//! bound below grows by that much there.
//!
//! Bounds that follow: a task scheduled by another node into an idle partition is announced
//! by a wake-up (producers announce every task due within `idle_pull_period` +
//! `prefetch_window`; see `Scheduler::announce`); should that wake-up be lost (pub/sub is
//! best effort: a reconnect, a full mailbox), the next idle look finds it, at most 1.5 ×
//! `idle_pull_period` later. A dead node's in-flight tasks make their partition busy (its
//! looks sweep expired leases every `pull_period`), so they come back within `lease` +
//! `pull_period`. A task scheduled long ago is prefetched in time because an idle look is
//! never planned later than its due minus the window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_storage::{ClaimBatch, LookRequest, Partition};
use rand::Rng;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::claim_size::ClaimSize;
use crate::dispatch::{self, Slots};
use crate::health::RetryBackoff;
use crate::late_claims;
use crate::runtime::{QueueRuntime, Runtime};

/// The most `(id, due)` pairs one look at one partition reads.
const MAX_PEEK: usize = 1_024;

/// How long a claimer that found no free handler slot waits for more slots to free up, so
/// that a saturated queue claims in batches instead of one task per round trip.
const SLOT_GATHERING: Duration = Duration::from_millis(1);

/// A claim on a busy queue waits for at least `concurrency / BUSY_CLAIM_SHARE` free slots
/// (half of the queue's slots on this node)...
const BUSY_CLAIM_SHARE: usize = 2;

/// ...but no longer than this: then it claims what it has. Slots come free as handlers end,
/// so on a saturated queue this is about the time half of them take to end when the store is
/// the bottleneck (a few thousand tasks a second per node); a queue that is not saturated has
/// the slots free and never waits. The backlogged partitions of a queue gather in turns
/// ([`QueueRuntime::busy_gathering`]), so at most [`BUSY_GATHERERS`] claims' slots wait at a
/// time.
const BUSY_GATHERING: Duration = Duration::from_millis(5);

/// How many partitions of a queue gather slots behind a backlog at once. Two rather than
/// one: while one claim's round trip is under way the next gathers, so the queue's slots are
/// not idle for a round trip per claim (on Redis at the defaults one turn drained a burst at
/// ~85k/s, two at ~130k/s, none at ~105k/s).
pub(crate) const BUSY_GATHERERS: usize = 2;

/// Looks in a row that found nothing due within the window and nothing in flight before a
/// partition counts as idle. More than one, so that a partition just gained (whose previous
/// owner may still be claiming for a moment) or just drained is watched for a while.
pub(crate) const LOOKS_BEFORE_IDLE: u32 = 3;

/// Every this many looks at an idle partition, one is a full look (lease sweep, pruning,
/// window); the others only read the earliest pending due, one plain command. An idle
/// partition has nothing in flight (or it would not be idle), so the sweep has nothing to do
/// there, and completed records are forgotten on the full looks, within this many idle
/// periods of their retention running out.
pub(crate) const FULL_LOOK_EVERY: u32 = 10;

/// How many expired leases one look puts back.
const REQUEUE_LIMIT: usize = 1_000;
/// How many completed records one look forgets.
const PRUNE_LIMIT: usize = 1_000;

/// The task that serves one partition while this node owns it: its looks and its claims.
pub(crate) struct PartitionWorker {
    wake: Notify,
    /// Signalled when [`PartitionWorker::expect`] moved `look_by_ms` earlier.
    replan: Notify,
    /// The latest cluster-clock time by which the next look must happen (a task expected
    /// after the window, minus the window); `u64::MAX` when nothing asks.
    look_by_ms: AtomicU64,
    cancel: CancellationToken,
    /// Whether the latest claim left tasks held back by their flow keys (true until the
    /// first claim says): then the end of a keyed task claims again at once.
    pub(crate) holds_back: std::sync::atomic::AtomicBool,
}

impl PartitionWorker {
    /// Starts serving `partition`: an immediate look, then claims on every wake and looks
    /// as the partition's activity asks (see the module docs).
    pub(crate) fn spawn(
        runtime: Arc<Runtime>,
        queue: Arc<QueueRuntime>,
        partition: Partition,
    ) -> Arc<PartitionWorker> {
        let runtime_tasks = runtime.partition_tasks.clone();
        let worker = Arc::new(PartitionWorker {
            wake: Notify::new(),
            replan: Notify::new(),
            look_by_ms: AtomicU64::new(u64::MAX),
            cancel: runtime.stop.child_token(),
            holds_back: std::sync::atomic::AtomicBool::new(true),
        });
        let claim_size = ClaimSize::new(runtime.config.engine.claim_batch);
        let serving = Serving {
            runtime,
            claim_size,
            queue,
            partition,
            worker: worker.clone(),
            backoff: RetryBackoff::new(),
            last_lease_deadline: 0,
            quiet_looks: 0,
            idle_looks: 0,
            next_look: Instant::now(),
        };
        runtime_tasks.spawn(serving.run());
        worker
    }

    /// Asks the worker to claim what is due now (and makes the partition busy).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Tells the worker that a task is due at `due_ms`, beyond the prefetch window: the
    /// partition is looked at again no later than `due_ms` minus the window, idle or not.
    pub(crate) fn expect(&self, look_by_ms: u64) {
        if self.look_by_ms.fetch_min(look_by_ms, Ordering::AcqRel) > look_by_ms {
            self.replan.notify_one();
        }
    }

    /// Stops the worker (ownership moved, or the node stops). Handlers already running go on.
    pub(crate) fn stop(&self) {
        self.cancel.cancel();
    }
}

/// Why a round of claims ended.
#[derive(Debug, PartialEq, Eq)]
enum ClaimsEnded {
    /// Nothing more is due now (or claiming must wait: paused, limits, an error).
    Drained,
    /// The next look came due while the claims waited for handler slots: look, then go on.
    LookDue,
    /// The worker stops.
    Stopped,
}

struct Serving {
    runtime: Arc<Runtime>,
    queue: Arc<QueueRuntime>,
    partition: Partition,
    worker: Arc<PartitionWorker>,
    backoff: RetryBackoff,
    /// The lease deadline of this worker's latest claim. Each claim gets a later one, so that
    /// `(node, lease deadline)` names one claim of the partition for `recover_claim`.
    last_lease_deadline: u64,
    /// Looks in a row that found nothing due within the window and nothing in flight.
    quiet_looks: u32,
    /// Looks since the partition became idle (see [`FULL_LOOK_EVERY`]).
    idle_looks: u32,
    /// When the next look is planned.
    next_look: Instant,
    /// How many tasks the next claim asks for (see [`ClaimSize`]).
    claim_size: ClaimSize,
}

impl Serving {
    async fn run(mut self) {
        self.look().await;
        // Spread the looks of many partitions over the period instead of bursting them.
        let period = self.runtime.config.engine.pull_period;
        let offset = rand::rng().random_range(0..period.as_millis().max(1) as u64);
        self.next_look = self
            .next_look
            .min(Instant::now() + Duration::from_millis(offset));
        loop {
            tokio::select! {
                biased;
                _ = self.worker.cancel.cancelled() => return,
                _ = tokio::time::sleep_until(self.next_look) => self.look().await,
                _ = self.worker.replan.notified() => self.replan(),
                _ = self.worker.wake.notified() => {
                    self.busy();
                    if self.claim_until_drained().await == ClaimsEnded::LookDue {
                        self.look().await;
                        // Claim on: the claims were cut short by the look, not drained.
                        self.worker.wake();
                    }
                }
            }
        }
    }

    /// The partition has work: back on `pull_period` at once.
    fn busy(&mut self) {
        self.quiet_looks = 0;
        self.idle_looks = 0;
        let soon = Instant::now() + self.runtime.config.engine.pull_period;
        self.next_look = self.next_look.min(soon);
    }

    /// Brings the next look forward to what [`PartitionWorker::expect`] asked for.
    fn replan(&mut self) {
        let look_by = self.worker.look_by_ms.load(Ordering::Acquire);
        if look_by != u64::MAX {
            let at = self.instant_of(look_by);
            self.next_look = self.next_look.min(at);
        }
    }

    /// The local instant of cluster-clock time `at_ms` (now, if it is past).
    fn instant_of(&self, at_ms: u64) -> Instant {
        let now_ms = self.runtime.clock.now_ms();
        Instant::now() + Duration::from_millis(at_ms.saturating_sub(now_ms))
    }

    /// One look at the partition, and the plan for the next: a light look (the earliest
    /// pending due only) while the partition is idle, a full one every [`FULL_LOOK_EVERY`]
    /// idle looks, when a light look finds something within the window, and while busy.
    async fn look(&mut self) {
        let idle = self.quiet_looks >= LOOKS_BEFORE_IDLE;
        // A look that a wake-up asked for ([`PartitionWorker::expect`]) is full at once: a
        // task is known to be coming, and a light look may answer from a view a few seconds
        // old (`TaskStore::pending_head`).
        let look_by = self.worker.look_by_ms.load(Ordering::Acquire);
        let soon = (self.runtime.clock.now_ms())
            .saturating_add(self.runtime.config.engine.pull_period.as_millis() as u64);
        let expected = look_by <= soon;
        if idle && !expected && self.idle_looks % FULL_LOOK_EVERY != 0 && self.light_look().await {
            return;
        }
        self.full_look().await;
    }

    /// Reads the partition's earliest pending due; returns false when it is within the
    /// window (the caller looks in full at once), else plans the next idle look.
    async fn light_look(&mut self) -> bool {
        let runtime = self.runtime.clone();
        let engine = &runtime.config.engine;
        let now = runtime.clock.now_ms();
        let window = engine.prefetch_window.as_millis() as u64;
        self.worker.look_by_ms.store(u64::MAX, Ordering::Release);
        let head = match runtime.store.pending_head(&self.partition).await {
            Ok(head) => {
                runtime.health.ok();
                head
            }
            Err(error) => {
                runtime.health.failed("pending_head", &error);
                self.plan_next_look(engine.pull_period);
                return true;
            }
        };
        if head.is_some_and(|due| due <= now.saturating_add(window)) {
            return false;
        }
        self.idle_looks += 1;
        self.plan_next_look(self.idle_delay(now, head));
        true
    }

    /// How long an idle partition waits for its next look: `idle_pull_period` plus up to
    /// half of it at random, but no longer than until `next_due` is within the window.
    fn idle_delay(&self, now: u64, next_due: Option<u64>) -> Duration {
        let engine = &self.runtime.config.engine;
        let idle = engine.idle_pull_period;
        let spread = rand::rng().random_range(0..=idle.as_millis() as u64 / 2);
        let mut delay = idle + Duration::from_millis(spread);
        if let Some(next_due) = next_due {
            let window = engine.prefetch_window.as_millis() as u64;
            let until = Duration::from_millis(next_due.saturating_sub(now + window));
            delay = delay.min(until.max(engine.pull_period));
        }
        delay
    }

    /// A full look: sweeps expired leases, prunes old completed records, prefetches the
    /// window's due times into the timer, and plans the next look.
    async fn full_look(&mut self) {
        let runtime = self.runtime.clone();
        let engine = &runtime.config.engine;
        let now = runtime.clock.now_ms();
        let window = engine.prefetch_window.as_millis() as u64;
        let horizon = now.saturating_add(window);
        let owned = runtime.workers.lock().len().max(1);
        // A look reads at most this many entries; beyond them the claims' `next_due_ms` chain on.
        let limit = (engine.max_prefetched / owned).clamp(16, MAX_PEEK);
        let retention = engine.executed_retention.as_millis() as u64;
        let request = LookRequest {
            now_ms: now,
            window_end_ms: horizon,
            window_limit: limit,
            requeue_limit: REQUEUE_LIMIT,
            prune_before_ms: Some(now.saturating_sub(retention)).filter(|&before| before > 0),
            prune_limit: PRUNE_LIMIT,
        };
        // Whatever `expect` asked for before this look is answered by it.
        self.worker.look_by_ms.store(u64::MAX, Ordering::Release);
        let report = match runtime.store.look(&self.partition, &request).await {
            Ok(report) => {
                runtime.health.ok();
                report
            }
            Err(error) => {
                runtime.health.failed("look", &error);
                self.quiet_looks = 0;
                self.plan_next_look(engine.pull_period);
                return;
            }
        };
        if !report.requeued.is_empty() {
            metrics::counter!("delayq_lease_expired_total", "queue" => self.partition.queue.as_str().to_owned())
                .increment(report.requeued.len() as u64);
            tracing::info!(partition = %self.partition, count = report.requeued.len(), "took back tasks whose lease expired");
        }
        let mut last_due = None;
        for (_, due) in &report.window {
            if last_due != Some(*due) {
                runtime.timer.insert(*due, self.partition.clone());
                last_due = Some(*due);
            }
        }
        let quiet = report.window.is_empty()
            && report.earliest_lease_deadline_ms.is_none()
            && report.pruned < PRUNE_LIMIT as u64;
        self.quiet_looks = if quiet { self.quiet_looks + 1 } else { 0 };
        let delay = if self.quiet_looks >= LOOKS_BEFORE_IDLE {
            self.idle_looks += 1;
            self.idle_delay(now, report.next_due_after_window_ms)
        } else {
            self.idle_looks = 0;
            engine.pull_period
        };
        self.plan_next_look(delay);
    }

    /// The next look comes after `delay`, or sooner if [`PartitionWorker::expect`] asked.
    fn plan_next_look(&mut self, delay: Duration) {
        self.next_look = Instant::now() + delay;
        self.replan();
    }

    /// Claims due tasks in batches until the partition has nothing due, then arms the timer
    /// for the next due. Each claim asks for as many tasks as there are free handler slots,
    /// up to the partition's [`ClaimSize`]: 32 at first, doubling while the claims come back
    /// full, up to `claim_batch`, so that a partition finding a few tasks at a time does not
    /// hold its queue's slots for a whole batch while its claim waits.
    async fn claim_until_drained(&mut self) -> ClaimsEnded {
        let runtime = self.runtime.clone();
        let lease = runtime.config.engine.lease.as_millis() as u64;
        loop {
            let mut slots = match self.acquire_slots(self.claim_size.next()).await {
                Ok(slots) => slots,
                Err(ended) => return ended,
            };
            let mut wanted = slots.queue.num_permits();
            let queue_name = &self.queue.name;
            // The cluster-wide limits: a slot of `global_concurrency` per task, a token of
            // `rate_limit` per task. Without one, the tasks wait (pending, in due order).
            if let Some(global) = &self.queue.limits.global {
                match global.acquire(&runtime, queue_name, wanted).await {
                    Ok(granted) => {
                        wanted = granted.num_permits();
                        slots.global = Some(granted);
                    }
                    Err(retry_at) => {
                        runtime.timer.insert(retry_at, self.partition.clone());
                        self.claim_size.reset();
                        return ClaimsEnded::Drained;
                    }
                }
            }
            let tokens = match &self.queue.limits.rate {
                Some(rate) => match rate.take(&runtime, queue_name, wanted as u64).await {
                    Ok(tokens) => {
                        wanted = tokens.count as usize;
                        Some(tokens)
                    }
                    Err(next_window) => {
                        runtime.timer.insert(next_window, self.partition.clone());
                        self.claim_size.reset();
                        return ClaimsEnded::Drained;
                    }
                },
                None => None,
            };
            if let Err(error) = self.queue.apply_flow_limits(&runtime).await {
                // Claiming without the per-key limits would break them: wait and ask again.
                runtime.health.failed("set_flow_limits", &error);
                self.claim_size.reset();
                let retry_at =
                    runtime.clock.now_ms() + self.backoff.next_delay().as_millis() as u64;
                runtime.timer.insert(retry_at, self.partition.clone());
                return ClaimsEnded::Drained;
            }
            let now = runtime.clock.now_ms();
            let lease_deadline = now.saturating_add(lease).max(self.last_lease_deadline + 1);
            self.last_lease_deadline = lease_deadline;
            let claimed = runtime
                .store
                .claim_due(
                    &self.partition,
                    now,
                    wanted,
                    lease_deadline,
                    runtime.node_id(),
                )
                .await;
            let batch = match claimed {
                Ok(batch) => {
                    runtime.health.ok();
                    self.backoff.reset();
                    late_claims::refresh(&runtime, batch, lease_deadline).await
                }
                Err(error) => {
                    runtime.health.failed("claim_due", &error);
                    self.claim_size.reset();
                    let retry_at = now + self.backoff.next_delay().as_millis() as u64;
                    runtime.timer.insert(retry_at, self.partition.clone());
                    if error.is_transient() {
                        // The claim may have run with its reply lost: fetch its tasks again
                        // before this partition is claimed anew (which replaces the receipt).
                        if let Some(batch) = self.recover_lost_claim(lease_deadline).await {
                            let batch = late_claims::refresh(&runtime, batch, lease_deadline).await;
                            self.dispatch(batch, slots);
                        }
                    }
                    return ClaimsEnded::Drained;
                }
            };
            if let (Some(rate), Some(tokens)) = (&self.queue.limits.rate, tokens) {
                rate.give_back(
                    tokens,
                    tokens.count.saturating_sub(batch.tasks.len() as u64),
                );
            }
            if batch.paused {
                // Nothing is claimed until the queue is resumed: the resume wakes this
                // worker (and every pull would look again), so the timer is not re-armed.
                tracing::debug!(partition = %self.partition, "queue paused: not claiming");
                self.claim_size.reset();
                return ClaimsEnded::Drained;
            }
            self.worker
                .holds_back
                .store(batch.held_back > 0, Ordering::Relaxed);
            let got = batch.tasks.len() + batch.dead_lettered.len();
            let next_due_ms = batch.next_due_ms;
            self.dispatch(batch, slots);
            self.claim_size.claimed(wanted, got);
            if got < wanted {
                if let Some(next) = next_due_ms {
                    runtime.timer.insert(next, self.partition.clone());
                }
                return ClaimsEnded::Drained;
            }
            if self.worker.cancel.is_cancelled() {
                return ClaimsEnded::Stopped;
            }
        }
    }

    /// Runs the claimed tasks, one slot of the queue and one of the node each (and one
    /// global slot each when the queue has `global_concurrency`); the slots left over are
    /// released.
    fn dispatch(&self, batch: ClaimBatch, mut slots: Slots) {
        let mut fires = Vec::with_capacity(batch.tasks.len());
        for task in batch.tasks {
            let Some(task_slots) = slots.split_one() else {
                break;
            };
            fires.push((task, task_slots));
        }
        dispatch::spawn_claim(self.runtime.clone(), self.queue.clone(), fires);
    }

    /// After a claim failed in a way that leaves its fate unknown (a response timeout, a
    /// dropped connection), asks for the tasks it may have moved to in flight, retrying
    /// while Redis is unreachable, until the claim's lease would run out anyway (lease expiry
    /// then brings the tasks back) or the worker stops. Without this, up to `claim_batch`
    /// tasks would wait a whole lease with no handler.
    async fn recover_lost_claim(&mut self, lease_deadline: u64) -> Option<ClaimBatch> {
        let runtime = self.runtime.clone();
        let mut backoff = RetryBackoff::new();
        loop {
            let recovered = runtime
                .store
                .recover_claim(&self.partition, runtime.node_id(), lease_deadline)
                .await;
            match recovered {
                Ok(batch) => {
                    runtime.health.ok();
                    if !batch.tasks.is_empty() {
                        tracing::info!(
                            partition = %self.partition,
                            recovered = batch.tasks.len(),
                            "claim reply lost: its tasks were fetched again"
                        );
                    }
                    return Some(batch);
                }
                Err(error) => runtime.health.failed("recover_claim", &error),
            }
            let delay = backoff.next_delay();
            let give_up_at = lease_deadline.saturating_sub(delay.as_millis() as u64);
            if runtime.clock.now_ms() >= give_up_at {
                return None;
            }
            tokio::select! {
                biased;
                _ = self.worker.cancel.cancelled() => return None,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Takes up to `limit` free handler slots of the queue, at least one, then as many of the
    /// node's (`node.max_running`, at least one; the queue's beyond those go back). The
    /// queue's come first: a claimer waiting for the node holds only its own queue's slots,
    /// never the node's that other queues wait for.
    async fn acquire_slots(&self, limit: usize) -> Result<Slots, ClaimsEnded> {
        // Only behind a backlog (the last claim came back full): a claim for the few tasks
        // that are due takes the slots it finds at once.
        let backlogged = self.claim_size.backlogged();
        let at_least = if backlogged {
            (self.queue.settings.concurrency / BUSY_CLAIM_SHARE).max(1)
        } else {
            1
        };
        // Behind a backlog, a few partitions of the queue gather at a time (the others wait
        // their turn, in order): held until this claim has its slots.
        let _turn = if backlogged {
            Some(tokio::select! {
                biased;
                _ = self.worker.cancel.cancelled() => return Err(ClaimsEnded::Stopped),
                turn = self.queue.busy_gathering.acquire() => turn.map_err(|_| ClaimsEnded::Stopped)?,
                _ = tokio::time::sleep_until(self.next_look) => return Err(ClaimsEnded::LookDue),
            })
        } else {
            None
        };
        let mut queue = self.gather(&self.queue.slots, limit, at_least).await?;
        let node = self
            .gather(&self.runtime.running_slots, queue.num_permits(), 1)
            .await?;
        let extra = queue.num_permits() - node.num_permits();
        if extra > 0 {
            drop(queue.split(extra));
        }
        Ok(Slots {
            queue,
            node,
            global: None,
        })
    }

    /// Takes up to `limit` free slots of `slots`, at least one. When none was free, it waits
    /// for one and then gathers more for a moment: on a saturated queue (or node) slots free
    /// up one by one, and claiming one task per round trip would waste the batch. When fewer
    /// than `at_least` (and `limit`) were free, it waits up to [`BUSY_GATHERING`] for that
    /// many: a busy queue's partitions then claim in shares of its slots instead of the few
    /// that came free since their last claim (each claim and ack costs a store call whatever
    /// it carries). The wait ends early when the worker stops or its next look is due (a
    /// saturated queue still sweeps its expired leases on time).
    async fn gather(
        &self,
        slots: &Arc<Semaphore>,
        limit: usize,
        at_least: usize,
    ) -> Result<OwnedSemaphorePermit, ClaimsEnded> {
        let slots = slots.clone();
        let had_free = slots.available_permits() > 0;
        let mut permits = tokio::select! {
            biased;
            _ = self.worker.cancel.cancelled() => return Err(ClaimsEnded::Stopped),
            permit = slots.clone().acquire_owned() => permit.map_err(|_| ClaimsEnded::Stopped)?,
            _ = tokio::time::sleep_until(self.next_look) => return Err(ClaimsEnded::LookDue),
        };
        top_up(&slots, &mut permits, limit);
        let at_least = at_least.min(limit);
        if permits.num_permits() < at_least {
            let missing = (at_least - permits.num_permits()) as u32;
            tokio::select! {
                biased;
                _ = self.worker.cancel.cancelled() => {}
                _ = tokio::time::sleep_until(self.next_look) => {}
                more = tokio::time::timeout(BUSY_GATHERING, slots.clone().acquire_many_owned(missing)) => {
                    if let Ok(Ok(more)) = more {
                        permits.merge(more);
                    }
                }
            }
            top_up(&slots, &mut permits, limit);
        } else if !had_free && permits.num_permits() < limit {
            tokio::time::sleep(SLOT_GATHERING).await;
            top_up(&slots, &mut permits, limit);
        }
        Ok(permits)
    }
}

/// Adds free slots to `permits` up to `limit` in all, without waiting.
fn top_up(slots: &Arc<Semaphore>, permits: &mut OwnedSemaphorePermit, limit: usize) {
    let more = slots
        .available_permits()
        .min(limit.saturating_sub(permits.num_permits()));
    if more > 0 {
        if let Ok(extra) = slots.clone().try_acquire_many_owned(more as u32) {
            permits.merge(extra);
        }
    }
}
