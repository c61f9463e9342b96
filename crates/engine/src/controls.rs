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

use delayq_coordinator::Wakeup;
use delayq_storage::QueueName;

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
            let partition = delayq_storage::Partition::new(queue.clone(), index);
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
