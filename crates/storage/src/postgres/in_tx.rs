//! Transactional scheduling: a schedule or cancel inside the application's own open
//! transaction, so that the task exists if and only if that transaction commits.
//!
//! The statements are those of [`PostgresStore::schedule`](crate::TaskStore::schedule) and
//! [`cancel`](crate::TaskStore::cancel), run on the caller's connection: the partition's row
//! is locked (`FOR UPDATE`) until the caller commits or rolls back, so other writers of that
//! partition, and its owner's claims, wait for the caller's transaction. Keep such a
//! transaction short. Nothing is retried here: a failure leaves the caller's transaction
//! aborted, as any failed statement does, and the caller retries the whole transaction.

use delayq_postgres::tokio_postgres::{Error as PgError, Transaction};

use super::partition::Part;
use super::{from_layer, PostgresStore};
use crate::error::StorageResult;
use crate::model::{Cancel, NewTask, Partition, ScheduleMode, ScheduleOutcome, TaskId};

impl PostgresStore {
    /// Schedules `task` on `partition` inside `tx`, the application's open transaction on
    /// this store's database (any connection: the statements name the schema). The task is
    /// visible to others, and fires, only once `tx` commits; a rollback leaves no trace.
    pub async fn schedule_in_tx(
        &self,
        tx: &Transaction<'_>,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.validate(&task)?;
        let retention = self.retention_ms();
        let outcome = async {
            let mut part = match Part::lock(tx, None, self.sql(), partition).await? {
                Ok(part) => part,
                Err(refused) => return Ok(Err(refused)),
            };
            let outcome = part.schedule(&task, mode, retention).await?;
            part.finish().await?;
            Ok::<_, PgError>(Ok(outcome))
        }
        .await
        .map_err(|error| self.in_tx_error("schedule_in_tx", &error))?;
        outcome
    }

    /// Cancels the task `id` of `partition` inside `tx` (the application's open
    /// transaction): the cancel takes effect when `tx` commits, as [`crate::TaskStore::cancel`]
    /// would at that moment; a rollback leaves the task as it was.
    pub async fn cancel_in_tx(
        &self,
        tx: &Transaction<'_>,
        partition: &Partition,
        id: &TaskId,
    ) -> StorageResult<Cancel> {
        let outcome = async {
            let part = match Part::lock(tx, None, self.sql(), partition).await? {
                Ok(part) => part,
                Err(refused) => return Ok(Err(refused)),
            };
            let outcome = part.cancel(id).await?;
            part.finish().await?;
            Ok::<_, PgError>(Ok(outcome))
        }
        .await
        .map_err(|error| self.in_tx_error("cancel_in_tx", &error))?;
        outcome
    }

    /// Sends `payload` on `channel` inside `tx`: delivered to the listeners only when `tx`
    /// commits (PostgreSQL queues the notifications of a transaction until then).
    pub async fn notify_in_tx(
        &self,
        tx: &Transaction<'_>,
        channel: &str,
        payload: &str,
    ) -> StorageResult<()> {
        tx.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
            .await
            .map(|_| ())
            .map_err(|error| self.in_tx_error("notify_in_tx", &error))
    }

    fn in_tx_error(&self, operation: &'static str, error: &PgError) -> crate::StorageError {
        from_layer(operation, self.database().error(operation, error))
    }
}
