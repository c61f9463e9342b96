//! A full look that finds nothing to change, in one read ([`Sql::look_at_once`](super::sql::Sql)).
//!
//! # Why
//! A busy partition is looked at in full every `pull_period` (the lease sweep and the
//! prefetch behind the claims). In a transaction that look is the partition's lock, the
//! expired leases, the window, the earliest lease and the next due after the window: five
//! statements and a BEGIN/COMMIT. During a burst of 100,000 over 64 partitions that was
//! ~2,400 of the ~12,300 statements, the difference between 0.12 and 0.1 statements per fired
//! task (BENCHMARKS.md, "Update 2026-12-07 (2)").
//!
//! # What it may skip
//! The read holds no lock, like the light look: it writes nothing. When it finds a lease that
//! ran out (judged by `min(now_ms, database clock)`, as the sweep is), the partition's row
//! missing (the transaction makes it), or when a prune of done records may find something
//! ([`PruneFloors`](super::prune_floor::PruneFloors)), the look runs in the partition's
//! transaction as before: every change a look makes is still made under the lock. What the
//! read reports is one snapshot; a claim or ack committed right after it changes the window
//! no more than it would change the locked look's answer a moment later.

use super::partition::beyond;
use super::{from_db, from_layer, to_db, PostgresStore};
use crate::error::StorageResult;
use crate::model::{LookReport, LookRequest, Partition, TaskId};

impl PostgresStore {
    /// The look of `request` (which prunes nothing) in one read; `None` when it must run in
    /// the partition's transaction: a lease ran out, or the partition's row does not exist.
    pub(super) async fn look_at_once(
        &self,
        partition: &Partition,
        request: &LookRequest,
    ) -> StorageResult<Option<LookReport>> {
        debug_assert!(request.prune_before_ms.is_none());
        let sql = self.inner.sql.clone();
        let queue = partition.queue.as_str().to_owned();
        let idx = i32::try_from(partition.index).unwrap_or(i32::MAX);
        let limit = request.window_limit.max(1);
        let params = (
            to_db(request.now_ms),
            to_db(request.window_end_ms),
            to_db(limit),
        );
        let rows = self
            .inner
            .database
            .run("look", move |client| {
                let sql = sql.clone();
                let queue = queue.clone();
                Box::pin(async move {
                    let statement = client.prepare_cached(&sql.look_at_once).await?;
                    client
                        .query(&statement, &[&queue, &idx, &params.0, &params.1, &params.2])
                        .await
                })
            })
            .await
            .map_err(|error| from_layer("look", error))?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        if let Some(error) = beyond(partition, first.get(0)) {
            return Err(error);
        }
        let present: bool = first.get(1);
        let expired: bool = first.get(2);
        if !present || expired {
            return Ok(None);
        }
        let window: Vec<(TaskId, u64)> = rows
            .iter()
            .filter_map(|row| {
                let id = TaskId::new(row.get::<_, Option<&str>>(5)?).ok()?;
                Some((id, from_db(row.get(6))))
            })
            .collect();
        let next_due_after_window_ms = if window.len() < limit {
            first.get::<_, Option<i64>>(3).map(from_db)
        } else {
            None
        };
        Ok(Some(LookReport {
            requeued: Vec::new(),
            pruned: 0,
            window,
            next_due_after_window_ms,
            earliest_lease_deadline_ms: first.get::<_, Option<i64>>(4).map(from_db),
        }))
    }
}
