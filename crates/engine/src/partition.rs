//! One owned partition: its periodic pull (prefetch, lease takeover, pruning) and its claims.

use std::sync::Arc;
use std::time::Duration;

use delayq_storage::Partition;
use rand::Rng;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::dispatch;
use crate::health::RetryBackoff;
use crate::runtime::{QueueRuntime, Runtime};

/// How many expired leases one pull puts back.
const REQUEUE_LIMIT: usize = 1_000;
/// How many completed records one prune forgets.
const PRUNE_LIMIT: usize = 1_000;
/// The most `(id, due)` pairs one pull of one partition reads.
const MAX_PEEK: usize = 1_024;
/// Prune the executed-set every this many pulls.
const PRUNE_EVERY: u32 = 10;

/// The task that serves one partition while this node owns it.
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
        let mut pull_count: u32 = 0;
        self.pull(true).await;
        loop {
            tokio::select! {
                biased;
                _ = self.worker.cancel.cancelled() => return,
                _ = self.worker.wake.notified() => self.claim_until_drained().await,
                _ = pulls.tick() => {
                    pull_count = pull_count.wrapping_add(1);
                    self.pull(pull_count % PRUNE_EVERY == 0).await;
                }
            }
        }
    }

    /// Prefetches the window into the timer, takes back expired leases, and now and then
    /// prunes the executed-set.
    async fn pull(&mut self, prune: bool) {
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
            Err(error) => {
                runtime.health.failed("peek_window", &error);
                return;
            }
        }
        match runtime
            .store
            .requeue_expired(&self.partition, now, REQUEUE_LIMIT)
            .await
        {
            Ok(requeued) if !requeued.is_empty() => {
                tracing::info!(partition = %self.partition, count = requeued.len(), "took back tasks whose lease expired");
                runtime.timer.insert(now, self.partition.clone());
            }
            Ok(_) => {}
            Err(error) => runtime.health.failed("requeue_expired", &error),
        }
        if prune {
            let retention = engine.executed_retention.as_millis() as u64;
            if let Err(error) = runtime
                .store
                .prune_done(&self.partition, now.saturating_sub(retention), PRUNE_LIMIT)
                .await
            {
                runtime.health.failed("prune_done", &error);
            }
        }
    }

    /// Claims due tasks in batches (as many as there are free handler slots, up to
    /// `claim_batch`) until the partition has nothing due, then arms the timer for the next due.
    async fn claim_until_drained(&mut self) {
        let runtime = self.runtime.clone();
        let batch_limit = runtime.config.engine.claim_batch.max(1);
        let lease = runtime.config.engine.lease.as_millis() as u64;
        loop {
            let Some(mut permits) = self.acquire_slots(batch_limit).await else {
                return;
            };
            let wanted = permits.num_permits();
            let now = runtime.clock.now_ms();
            let claimed = runtime
                .store
                .claim_due(
                    &self.partition,
                    now,
                    wanted,
                    now.saturating_add(lease),
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
                    return;
                }
            };
            let got = batch.tasks.len();
            for task in batch.tasks {
                let Some(slot) = permits.split(1) else {
                    break;
                };
                dispatch::spawn_execution(runtime.clone(), self.queue.clone(), task, slot);
            }
            drop(permits);
            if got < wanted {
                if let Some(next) = batch.next_due_ms {
                    runtime.timer.insert(next, self.partition.clone());
                }
                return;
            }
            if self.worker.cancel.is_cancelled() {
                return;
            }
        }
    }

    /// Waits for at least one free handler slot of the queue, then takes up to `limit`.
    async fn acquire_slots(&self, limit: usize) -> Option<OwnedSemaphorePermit> {
        let slots = self.queue.slots.clone();
        let mut permits = tokio::select! {
            biased;
            _ = self.worker.cancel.cancelled() => return None,
            permit = slots.clone().acquire_owned() => permit.ok()?,
        };
        let more = slots.available_permits().min(limit.saturating_sub(1));
        if more > 0 {
            if let Ok(extra) = slots.try_acquire_many_owned(more as u32) {
                permits.merge(extra);
            }
        }
        Some(permits)
    }
}
