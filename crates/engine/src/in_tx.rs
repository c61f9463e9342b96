//! Transactional scheduling on PostgreSQL: [`Scheduler::schedule_in_tx`] and
//! [`Scheduler::cancel_in_tx`] write through the application's own open transaction, so a
//! task exists if and only if the business write it belongs to commits.
//!
//! The transaction type is tokio-postgres's (`tokio_postgres::Transaction`, re-exported as
//! `delayq_postgres::tokio_postgres`); a deadpool-postgres transaction dereferences to it
//! (`&*tx`). The wake-up of the partition's owner is a `NOTIFY` in the same transaction:
//! PostgreSQL delivers it at commit and drops it on rollback, so the owner hears of exactly
//! the tasks that exist.
//!
//! What the caller must know: the partition's row stays locked from the call until the
//! transaction ends, so the owner's claims on that partition and other schedules to it wait
//! for the caller; keep the transaction short. Two transactions that schedule to the same
//! two partitions in opposite orders can deadlock (PostgreSQL aborts one with SQLSTATE
//! 40P01); as for any deadlock, the application retries its transaction. The
//! `delayq_scheduled_total` counter does not count these schedules (they may roll back). A
//! queue's first schedule records its partition count outside the transaction (as any
//! schedule does); that record stays after a rollback, and is all that does.

use delayq_coordinator::{PostgresCoordinator, Wakeup};
use delayq_postgres::tokio_postgres::Transaction;
use delayq_storage::{Cancel, Partition, PostgresStore, QueueName, ScheduleOutcome, TaskId};

use crate::error::{EngineError, EngineResult};
use crate::scheduler::{scheduled, PreparedTask, ScheduleRequest, Scheduler};
use crate::task::Scheduled;

impl Scheduler {
    /// Schedules `request`'s task of `queue` inside `tx`, the application's open transaction
    /// on the scheduler's PostgreSQL database: the task exists, fires and can be seen by
    /// others only once `tx` commits; a rollback leaves nothing. Same modes, validation and
    /// answer as [`Scheduler::schedule_request`]; its owner is woken at commit.
    ///
    /// Fails with [`EngineError::NotPostgres`] on another backend. See the
    /// [module documentation](crate::in_tx) for the lock this holds until commit.
    ///
    /// ```no_run
    /// # async fn demo(scheduler: delayq_engine::Scheduler, client: &mut delayq_postgres::tokio_postgres::Client)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use delayq_engine::{ScheduleRequest, When};
    /// use std::time::Duration;
    ///
    /// let tx = client.transaction().await?;
    /// tx.execute("INSERT INTO orders (id, state) VALUES (42, 'unpaid')", &[]).await?;
    /// let timeout = ScheduleRequest::new("order-42", When::In(Duration::from_secs(1800)), "{}");
    /// scheduler.schedule_in_tx(&tx, "order-timeout", timeout).await?;
    /// tx.commit().await?; // the order and its timeout, or neither
    /// # Ok(())
    /// # }
    /// ```
    pub async fn schedule_in_tx(
        &self,
        tx: &Transaction<'_>,
        queue: &str,
        request: ScheduleRequest,
    ) -> EngineResult<Scheduled> {
        let store = self.postgres_store()?;
        let PreparedTask {
            partition,
            task,
            mode,
            now,
        } = self.prepare(queue, request).await?;
        let (id, due_ms) = (task.id.clone(), task.due_ms);
        let outcome = store.schedule_in_tx(tx, &partition, task, mode).await?;
        let announce = matches!(
            outcome,
            ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. }
        );
        if announce && self.needs_wakeup(due_ms, now) {
            let wakeup = Wakeup {
                queue: partition.queue.as_str().to_owned(),
                partition: partition.index,
                due_ms,
            };
            let channel = PostgresCoordinator::wake_channel(store.database().schema().name());
            let payload = PostgresCoordinator::wake_payload(&wakeup);
            store.notify_in_tx(tx, &channel, &payload).await?;
        }
        Ok(scheduled(&partition, &id, due_ms, outcome))
    }

    /// Cancels the task `id` of `queue` inside `tx`, the application's open transaction: the
    /// cancel takes effect at commit (with the answer [`Scheduler::cancel`] gives, judged
    /// when the call ran); a rollback leaves the task as it was.
    pub async fn cancel_in_tx(
        &self,
        tx: &Transaction<'_>,
        queue: &str,
        id: &str,
    ) -> EngineResult<Cancel> {
        let store = self.postgres_store()?;
        let queue = QueueName::new(queue)?;
        let id = TaskId::new(id)?;
        let Some(layout) = self.layout_for_read(&queue).await? else {
            return Ok(Cancel::NotFound);
        };
        let partition = Partition::new(queue, layout.partition_of(&id));
        Ok(store.cancel_in_tx(tx, &partition, &id).await?)
    }

    fn postgres_store(&self) -> EngineResult<&PostgresStore> {
        self.runtime
            .postgres
            .as_ref()
            .ok_or(EngineError::NotPostgres)
    }
}
