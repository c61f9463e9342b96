//! A claim in one statement ([`Sql::claim_at_once`](super::sql::Sql)), committed on its own.
//!
//! # Why
//! A claim in a transaction (lock the partition's row, read the due tasks, mark them in
//! flight, commit) holds the partition's lock over four round trips to the node; during a
//! burst the partition's acks and other claims queue behind it, and `pg_stat_activity` showed
//! the connections mostly *idle in transaction*, waiting for the node. The same steps in one
//! statement hold the lock only while the statement runs, and cost one statement and one
//! transaction per claim instead of five statements.
//!
//! # Same state machine
//! The statement does what [`Part::claim_due`](super::partition::Part) does, in SQL: the
//! byte cap (at least one task), claim numbers `max(sequence + 1, clock in µs)` and on, the
//! receipt of a claim that took something, the pause and the registered partition count read
//! under the lock. The one case it leaves to the transaction is a partition whose row does not
//! exist yet (it answers no row, and the transaction makes the row). The conformance suite
//! holds both to the same cases.

use super::partition::{beyond, claimed_task};
use super::{from_db, from_layer, to_db, PostgresStore};
use crate::error::StorageResult;
use crate::model::{ClaimBatch, Partition, TaskId};

impl PostgresStore {
    /// The claim of [`TaskStore::claim_due`](crate::TaskStore::claim_due) in one statement;
    /// `None` when the partition's row does not exist yet (claim in a transaction instead).
    ///
    /// Sent once: a lost reply is returned as a transient error (the claim may have run; the
    /// engine then asks for its receipt, `recover_claim`).
    pub(super) async fn claim_at_once(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<Option<ClaimBatch>> {
        let sql = self.sql();
        let queue = partition.queue.as_str().to_owned();
        let idx = i32::try_from(partition.index).unwrap_or(i32::MAX);
        let owner = owner.to_owned();
        // `LIMIT 0` takes nothing and still reports the next due, as the transaction does.
        let params = (
            to_db(now_ms),
            to_db(limit),
            to_db(self.inner.options.max_claim_bytes),
            to_db(lease_deadline_ms),
        );
        let rows = self
            .inner
            .database
            .run_once("claim_due", move |client| {
                Box::pin(async move {
                    let statement = client.prepare_cached(&sql.claim_at_once).await?;
                    client
                        .query(
                            &statement,
                            &[
                                &queue, &idx, &params.0, &params.1, &params.2, &params.3, &owner,
                            ],
                        )
                        .await
                })
            })
            .await;
        self.inner.heads.forget(partition);
        let rows = rows.map_err(|error| from_layer("claim_due", error))?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        if let Some(error) = beyond(partition, first.get(0)) {
            return Err(error);
        }
        if first.get::<_, bool>(1) {
            return Ok(Some(ClaimBatch {
                paused: true,
                ..ClaimBatch::default()
            }));
        }
        let next_due_ms = first.get::<_, Option<i64>>(2).map(from_db);
        let mut tasks = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(id) = row.get::<_, Option<&str>>(3) else {
                continue;
            };
            // The statement takes only ids a `TaskId` accepts (not empty, at most 512 bytes;
            // text holds no NUL).
            let Ok(id) = TaskId::new(id) else {
                continue;
            };
            let claim = from_db(row.get(9));
            tasks.push(claimed_task(partition, id, row, 3, row.get(7), claim));
        }
        Ok(Some(ClaimBatch {
            tasks,
            next_due_ms,
            dead_lettered: Vec::new(),
            paused: false,
            held_back: 0,
        }))
    }
}
