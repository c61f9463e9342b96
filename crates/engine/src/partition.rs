//! One owned partition: its periodic pull (prefetch, lease takeover, pruning) and its claims.

use std::sync::Arc;
use std::time::Duration;

use delayq_storage::{ClaimBatch, Partition};
use rand::Rng;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::dispatch;
use crate::health::RetryBackoff;
use crate::runtime::{QueueRuntime, Runtime};

/// The most `(id, due)` pairs one pull of one partition reads.
const MAX_PEEK: usize = 1_024;

/// How long a claimer that found no free handler slot waits for more slots to free up, so
/// that a saturated queue claims in batches instead of one task per round trip.
const SLOT_GATHERING: Duration = Duration::from_millis(1);

/// The task that serves one partition while this node owns it: its prefetching pulls and its
/// claims. Lease takeover and pruning run in [`crate::maintenance`], apart, so that a
/// saturated queue (claims waiting for handler slots) never holds them up.
pub(crate) struct PartitionWorker {
    wake: Notify,
    cancel: CancellationToken,
}

impl PartitionWorker {
    /// Starts serving `partition`: an immediate pull, then claims on every wake and a pull
    /// every `pull_period`.
    pub(crate) fn spawn(
        runtime: Arc<Runtime>,
        queue: Arc<QueueRuntime>,
        partition: Partition,
    ) -> Arc<PartitionWorker> {
        let runtime_tasks = runtime.partition_tasks.clone();
        let worker = Arc::new(PartitionWorker {
            wake: Notify::new(),
            cancel: runtime.stop.child_token(),
        });
        let serving = Serving {
            runtime,
            queue,
            partition,
            worker: worker.clone(),
            backoff: RetryBackoff::new(),
            last_lease_deadline: 0,
        };
        runtime_tasks.spawn(serving.run());
        worker
    }

    /// Asks the worker to claim what is due now.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Stops the worker (ownership moved, or the node stops). Handlers already running go on.
    pub(crate) fn stop(&self) {
        self.cancel.cancel();
    }
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
}

impl Serving {
    async fn run(mut self) {
        let period = self.runtime.config.engine.pull_period;
        // Spread the pulls of many partitions over the period instead of bursting them.
        let offset = rand::rng().random_range(0..period.as_millis().max(1) as u64);
        let mut pulls = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_millis(offset),
            period,
        );
        pulls.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.pull().await;
        loop {
            tokio::select! {
                biased;
                _ = self.worker.cancel.cancelled() => return,
                _ = pulls.tick() => self.pull().await,
                _ = self.worker.wake.notified() => self.claim_until_drained().await,
            }
        }
    }

    /// Prefetches the window's due times into the timer.
    async fn pull(&mut self) {
        let runtime = &self.runtime;
        let engine = &runtime.config.engine;
        let now = runtime.clock.now_ms();
        let horizon = now.saturating_add(engine.prefetch_window.as_millis() as u64);
        let owned = runtime.workers.lock().len().max(1);
        // A pull reads at most this many entries; beyond them the claims' `next_due_ms` chain on.
        let limit = (engine.max_prefetched / owned).clamp(16, MAX_PEEK);
        match runtime
            .store
            .peek_window(&self.partition, 0, horizon, limit)
            .await
        {
            Ok(entries) => {
                runtime.health.ok();
                let mut last_due = None;
                for (_, due) in entries {
                    if last_due != Some(due) {
                        runtime.timer.insert(due, self.partition.clone());
                        last_due = Some(due);
                    }
                }
            }
            Err(error) => runtime.health.failed("peek_window", &error),
        }
    }

    /// Claims due tasks in batches (as many as there are free handler slots, up to
    /// `claim_batch`) until the partition has nothing due, then arms the timer for the next due.
    async fn claim_until_drained(&mut self) {
        let runtime = self.runtime.clone();
        let batch_limit = runtime.config.engine.claim_batch.max(1);
        let lease = runtime.config.engine.lease.as_millis() as u64;
        loop {
            let Some(permits) = self.acquire_slots(batch_limit).await else {
                return;
            };
            let mut wanted = permits.num_permits();
            let queue_name = &self.queue.name;
            // The cluster-wide limits: a slot of `global_concurrency` per task, a token of
            // `rate_limit` per task. Without one, the tasks wait (pending, in due order).
            let global = match &self.queue.limits.global {
                Some(global) => match global.acquire(&runtime, queue_name, wanted).await {
                    Ok(granted) => {
                        wanted = granted.num_permits();
                        Some(granted)
                    }
                    Err(retry_at) => {
                        runtime.timer.insert(retry_at, self.partition.clone());
                        return;
                    }
                },
                None => None,
            };
            let tokens = match &self.queue.limits.rate {
                Some(rate) => match rate.take(&runtime, queue_name, wanted as u64).await {
                    Ok(tokens) => {
                        wanted = tokens.count as usize;
                        Some(tokens)
                    }
                    Err(next_window) => {
                        runtime.timer.insert(next_window, self.partition.clone());
                        return;
                    }
                },
                None => None,
            };
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
                    batch
                }
                Err(error) => {
                    runtime.health.failed("claim_due", &error);
                    let retry_at = now + self.backoff.next_delay().as_millis() as u64;
                    runtime.timer.insert(retry_at, self.partition.clone());
                    if error.is_transient() {
                        // The claim may have run with its reply lost: fetch its tasks again
                        // before this partition is claimed anew (which replaces the receipt).
                        if let Some(batch) = self.recover_lost_claim(lease_deadline).await {
                            self.dispatch(batch, permits, global);
                        }
                    }
                    return;
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
                return;
            }
            let got = batch.tasks.len() + batch.dead_lettered.len();
            let next_due_ms = batch.next_due_ms;
            self.dispatch(batch, permits, global);
            if got < wanted {
                if let Some(next) = next_due_ms {
                    runtime.timer.insert(next, self.partition.clone());
                }
                return;
            }
            if self.worker.cancel.is_cancelled() {
                return;
            }
        }
    }

    /// Runs the claimed tasks, one handler slot each (and one global slot each when the
    /// queue has `global_concurrency`); the slots left over are released.
    fn dispatch(
        &self,
        batch: ClaimBatch,
        mut permits: OwnedSemaphorePermit,
        mut global: Option<OwnedSemaphorePermit>,
    ) {
        for task in batch.tasks {
            let Some(slot) = permits.split(1) else {
                break;
            };
            let global_slot = match global.as_mut() {
                // Never more tasks than slots (the claim asked for as many); should that ever
                // change, a task runs rather than waits a lease in flight.
                Some(global) => global.split(1),
                None => None,
            };
            dispatch::spawn_execution(
                self.runtime.clone(),
                self.queue.clone(),
                task,
                slot,
                global_slot,
            );
        }
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

    /// Takes up to `limit` free handler slots of the queue, at least one. When none was
    /// free, it waits for one and then gathers more for a moment: on a saturated queue slots
    /// free up one by one, and claiming one task per round trip would waste the batch.
    async fn acquire_slots(&self, limit: usize) -> Option<OwnedSemaphorePermit> {
        let slots = self.queue.slots.clone();
        let had_free = slots.available_permits() > 0;
        let mut permits = tokio::select! {
            biased;
            _ = self.worker.cancel.cancelled() => return None,
            permit = slots.clone().acquire_owned() => permit.ok()?,
        };
        top_up(&slots, &mut permits, limit);
        if !had_free && permits.num_permits() < limit {
            tokio::time::sleep(SLOT_GATHERING).await;
            top_up(&slots, &mut permits, limit);
        }
        Some(permits)
    }
}

/// Adds free slots to `permits` up to `limit` in all, without waiting.
fn top_up(slots: &Arc<tokio::sync::Semaphore>, permits: &mut OwnedSemaphorePermit, limit: usize) {
    let more = slots
        .available_permits()
        .min(limit.saturating_sub(permits.num_permits()));
    if more > 0 {
        if let Ok(extra) = slots.clone().try_acquire_many_owned(more as u32) {
            permits.merge(extra);
        }
    }
}
