//! Queue controls of [`Scheduler`]: pause and resume (guarantee 11).
//!
//! The pause flag lives in the store, in every partition of the queue, and the claim checks
//! it atomically ([`TaskStore::set_paused`](delayq_storage::TaskStore::set_paused)): when
//! [`Scheduler::pause_queue`] returns, no node claims a task of the queue, whether it heard
//! of the pause or not, and a node that starts or takes a partition over meanwhile finds the
//! flag on its first claim. A worker whose claim answers "paused" stops claiming until a
//! wake-up. [`Scheduler::resume_queue`] clears the flags and then wakes every partition's
//! owner (one wake-up per partition, due now), so the backlog fires at once; a lost wake-up
//! is caught by the owner's next pull.
//!
//! [`Scheduler::delete_queue`] removes a queue for good. Without `force` it first counts the
//! queue's tasks over every partition (`stats`) and refuses with
//! [`EngineError::QueueNotEmpty`] when any is pending, in flight or dead; then the store
//! deletes every partition and the registry entry
//! ([`TaskStore::delete_queue`](delayq_storage::TaskStore::delete_queue)). The check and the
//! delete are not one atomic step: a schedule landing between them is deleted too (it is
//! counted in the answer), and a schedule racing the delete itself may be lost (its producer
//! had the partition count cached and wrote into a partition already deleted: the task stays
//! in Redis without a registry entry, so nothing serves it until the queue is used again) or
//! may re-create the queue (its producer registered the queue anew). Delete a queue once its
//! producers stopped. Nodes stop serving a deleted queue at their next catalog refresh (every
//! `pull_period`, see `Runtime::rebalance`), unless they have a handler for it by name; this
//! process forgets it at once. A recurring schedule that targets the queue is not deleted,
//! and its next tick creates the queue again.

use delayq_coordinator::Wakeup;
use delayq_storage::{Partition, PartitionStats, QueueName};
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::error::{EngineError, EngineResult};
use crate::scheduler::Scheduler;

impl Scheduler {
    /// Pauses `queue` cluster-wide: once this returns, no node claims a task of it;
    /// schedules, cancels and dead-letter operations go on. Idempotent. Fails with
    /// `UnknownQueue` for a queue the store does not know.
    pub async fn pause_queue(&self, queue: &str) -> EngineResult<()> {
        let (queue, partitions) = self.known_queue(queue).await?;
        self.runtime
            .store
            .set_paused(&queue, partitions, true)
            .await?;
        tracing::info!(%queue, "queue paused");
        Ok(())
    }

    /// Resumes `queue`: its due backlog fires at once (every partition's owner is woken).
    /// Idempotent.
    pub async fn resume_queue(&self, queue: &str) -> EngineResult<()> {
        let (queue, partitions) = self.known_queue(queue).await?;
        self.runtime
            .store
            .set_paused(&queue, partitions, false)
            .await?;
        let now = self.now_ms();
        for index in 0..partitions {
            let partition = Partition::new(queue.clone(), index);
            if self.runtime.is_member() && self.runtime.arm(&partition, now).await {
                continue;
            }
            let wakeup = Wakeup {
                queue: queue.as_str().to_owned(),
                partition: index,
                due_ms: now,
            };
            if let Err(error) = self.runtime.coordinator.wake(wakeup).await {
                tracing::debug!(%error, %partition, "resume wake-up not sent; the owner's pull will claim");
            }
        }
        tracing::info!(%queue, "queue resumed");
        Ok(())
    }

    /// Whether each known queue is paused, by name.
    pub async fn paused_queues(&self) -> EngineResult<Vec<String>> {
        Ok(self
            .runtime
            .store
            .paused_queues()
            .await?
            .into_iter()
            .map(|(queue, _)| queue.as_str().to_owned())
            .collect())
    }

    /// Deletes `queue` cluster-wide: every task (pending, in flight, dead, done), its pause
    /// flag and its registry entry, so `stats` no longer lists it and nodes stop serving it
    /// within one `pull_period`. Returns the tasks removed (pending + in flight + dead).
    ///
    /// Without `force`, a queue holding pending, in-flight or dead tasks is refused with
    /// [`EngineError::QueueNotEmpty`] naming the counts, and nothing is deleted (done records
    /// alone do not count). Fails with `UnknownQueue` for a queue the store does not know. See
    /// the module docs for races with concurrent schedules.
    pub async fn delete_queue(&self, queue: &str, force: bool) -> EngineResult<u64> {
        let name = QueueName::new(queue)?;
        // The registry itself, not this process's cache: a queue deleted elsewhere is unknown.
        let partitions = self
            .runtime
            .store
            .queues()
            .await?
            .into_iter()
            .find(|(known, _)| known == &name)
            .map(|(_, partitions)| partitions)
            .ok_or_else(|| EngineError::UnknownQueue {
                queue: queue.to_owned(),
            })?;
        if !force {
            let now = self.now_ms();
            let store = &self.runtime.store;
            let per_partition: Vec<PartitionStats> = stream::iter(0..partitions)
                .map(|index| {
                    let partition = Partition::new(name.clone(), index);
                    async move { store.stats(&partition, now).await }
                })
                .buffer_unordered(16)
                .try_collect()
                .await?;
            let mut totals = PartitionStats::default();
            for stats in per_partition {
                totals += stats;
            }
            if totals.pending + totals.inflight + totals.dead > 0 {
                return Err(EngineError::QueueNotEmpty {
                    queue: queue.to_owned(),
                    pending: totals.pending,
                    inflight: totals.inflight,
                    dead: totals.dead,
                });
            }
        }
        let removed = self.runtime.store.delete_queue(&name, partitions).await?;
        self.runtime.forget_queue(name.as_str());
        if self.runtime.is_member() {
            self.runtime.rebalance().await;
        }
        tracing::info!(%name, removed, force, "queue deleted");
        Ok(removed)
    }

    async fn known_queue(&self, queue: &str) -> EngineResult<(QueueName, u32)> {
        let name = QueueName::new(queue)?;
        match self.partitions_for_read(&name).await? {
            Some(partitions) => Ok((name, partitions)),
            None => Err(EngineError::UnknownQueue {
                queue: queue.to_owned(),
            }),
        }
    }
}
