//! One partition inside one transaction that holds its lock: the state machine of a
//! partition, step for step the memory twin's (`memory/partition/`), on rows.

use std::sync::Arc;

use bytes::Bytes;
use delayq_postgres::deadpool_postgres::StatementCache;
use delayq_postgres::tokio_postgres::types::ToSql;
use delayq_postgres::tokio_postgres::{Error as PgError, Row, Statement, Transaction};

use super::sql::Sql;
use super::{from_db, to_db};
use crate::error::StorageError;
use crate::model::{
    Cancel, ClaimBatch, ClaimedTask, DeadTask, FailAction, FailOutcome, LeaseToken, LookReport,
    LookRequest, NewTask, Partition, PartitionStats, ScheduleMode, ScheduleOutcome, TaskId,
    TaskInfo, TaskState,
};
use crate::recurring::TickOutcome;
use crate::TraceParent;

/// Where a live task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Pending { at_ms: u64 },
    Inflight { claim: u64, lease_deadline_ms: u64 },
    Dead { failed_ms: u64 },
}

/// A live task's row.
#[derive(Debug)]
pub(super) struct TaskRow {
    place: Place,
    due_ms: u64,
    scheduled_due_ms: u64,
    attempt: u32,
    generation: u64,
    payload: Vec<u8>,
    last_error: Option<String>,
    traceparent: Option<TraceParent>,
}

impl TaskRow {
    fn current_due_ms(&self) -> u64 {
        match self.place {
            Place::Pending { at_ms } => at_ms,
            _ => self.due_ms,
        }
    }

    fn from_row(row: &Row) -> Self {
        let state: String = row.get(0);
        let at_ms = from_db(row.get(1));
        let place = match state.as_str() {
            "inflight" => Place::Inflight {
                claim: from_db(row.get::<_, Option<i64>>(6).unwrap_or(0)),
                lease_deadline_ms: at_ms,
            },
            "dead" => Place::Dead { failed_ms: at_ms },
            _ => Place::Pending { at_ms },
        };
        TaskRow {
            place,
            due_ms: from_db(row.get(2)),
            scheduled_due_ms: from_db(row.get(3)),
            attempt: u32::try_from(row.get::<_, i32>(4)).unwrap_or(0),
            generation: from_db(row.get(5)),
            payload: row.get(7),
            last_error: row.get(8),
            traceparent: stored_traceparent(row.get(9)),
        }
    }
}

/// A stored `traceparent` column; one that no longer parses (written by outside tooling) is
/// dropped: the task fires without it.
pub(super) fn stored_traceparent(value: Option<&str>) -> Option<TraceParent> {
    TraceParent::parse(value?).ok()
}

/// A claimed task from a row whose columns from `at` on are id, due_ms, attempt, generation,
/// payload, traceparent (the id and the payload already read), with its claim number.
pub(super) fn claimed_task(
    partition: &Partition,
    id: TaskId,
    row: &Row,
    at: usize,
    payload: Vec<u8>,
    claim: u64,
) -> ClaimedTask {
    let generation = from_db(row.get(at + 3));
    ClaimedTask {
        token: LeaseToken {
            partition: partition.clone(),
            id: id.clone(),
            generation,
            claim,
        },
        id,
        due_ms: from_db(row.get(at + 1)),
        attempt: u32::try_from(row.get::<_, i32>(at + 2)).unwrap_or(0),
        generation,
        payload: Bytes::from(payload),
        traceparent: stored_traceparent(row.get(at + 5)),
    }
}

/// A done record.
struct DoneRow {
    due_ms: u64,
    scheduled_due_ms: u64,
    attempt: u32,
    generation: u64,
    completed_ms: u64,
}

/// Whether a token holds its lease (as the memory twin's `Lease`).
enum Lease {
    Held,
    Superseded,
    Stale,
    Cancelled,
}

/// `NoSuchPartition` when the queue is registered with `registered` partitions, fewer than
/// `partition` needs.
pub(super) fn beyond(partition: &Partition, registered: Option<i32>) -> Option<StorageError> {
    let partitions = u32::try_from(registered?).unwrap_or(0);
    (partition.index >= partitions).then(|| StorageError::NoSuchPartition {
        queue: partition.queue.to_string(),
        index: partition.index,
        partitions,
    })
}

/// `sql` prepared on the transaction's connection: from the pool connection's cache when
/// there is one, else prepared now (an application's transaction).
async fn prepare(
    tx: &Transaction<'_>,
    cache: Option<&StatementCache>,
    sql: &str,
) -> Result<Statement, PgError> {
    match cache {
        Some(cache) => cache.prepare(tx.client(), sql).await,
        None => tx.prepare(sql).await,
    }
}

/// A token that no longer holds its lease.
pub(super) struct StaleLease;

/// One partition, locked for the rest of the transaction.
///
/// The transaction is the driver's: one of delayq's pool (whose connections cache prepared
/// statements, `cache`) or an application's own (`schedule_in_tx`: no cache, the statements
/// are prepared on that connection as needed).
pub(super) struct Part<'t, 'x> {
    tx: &'t Transaction<'x>,
    cache: Option<&'t StatementCache>,
    sql: Arc<Sql>,
    queue: String,
    idx: i32,
    sequence: i64,
    locked_sequence: i64,
    /// The database clock when the lock was taken, in ms and µs.
    pub(super) now_ms: u64,
    now_us: i64,
    /// Whether the queue was paused when the lock was taken (a pause waits for the lock).
    pub(super) paused: bool,
    /// Ids known, under this lock, to have neither a task row nor a done record
    /// ([`Part::learn_absent`]): scheduling one skips the reads and the done record's delete.
    absent: std::collections::HashSet<String>,
}

impl<'t, 'x> Part<'t, 'x> {
    /// Locks `partition` (making its row the first time), or tells that the queue is
    /// registered with fewer partitions (`NoSuchPartition`, nothing written). One statement
    /// when the partition exists.
    pub(super) async fn lock(
        tx: &'t Transaction<'x>,
        cache: Option<&'t StatementCache>,
        sql: Arc<Sql>,
        partition: &Partition,
    ) -> Result<Result<Part<'t, 'x>, StorageError>, PgError> {
        let queue = partition.queue.as_str().to_owned();
        let idx = i32::try_from(partition.index).unwrap_or(i32::MAX);
        let lock = prepare(tx, cache, &sql.lock_partition).await?;
        let row = match tx.query_opt(&lock, &[&queue, &idx]).await? {
            Some(row) => row,
            None => {
                let count = prepare(tx, cache, &sql.queue_partitions).await?;
                let registered: Option<i32> =
                    tx.query_opt(&count, &[&queue]).await?.map(|row| row.get(0));
                if let Some(error) = beyond(partition, registered) {
                    return Ok(Err(error));
                }
                let ensure = prepare(tx, cache, &sql.ensure_partition).await?;
                tx.execute(&ensure, &[&queue, &idx]).await?;
                tx.query_one(&lock, &[&queue, &idx]).await?
            }
        };
        if let Some(error) = beyond(partition, row.get(3)) {
            return Ok(Err(error));
        }
        let sequence: i64 = row.get(0);
        Ok(Ok(Part {
            tx,
            cache,
            sql,
            queue,
            idx,
            sequence,
            locked_sequence: sequence,
            now_ms: from_db(row.get(1)),
            now_us: row.get(2),
            paused: row.get(4),
            absent: std::collections::HashSet::new(),
        }))
    }

    /// Writes back what changed in the partition's row.
    pub(super) async fn finish(self) -> Result<(), PgError> {
        if self.sequence != self.locked_sequence {
            let sequence = self.sequence;
            self.exec(&self.sql.store_sequence, &[&sequence]).await?;
        }
        Ok(())
    }

    /// A new generation or claim number: above every earlier one, and above the clock in µs
    /// so that a partition made again (after a queue delete) never reuses one.
    fn next_sequence(&mut self) -> u64 {
        self.sequence = (self.sequence + 1).max(self.now_us);
        from_db(self.sequence)
    }

    /// Runs `sql` with `(queue, idx, extra...)`.
    async fn query(&self, sql: &str, extra: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, PgError> {
        let statement = prepare(self.tx, self.cache, sql).await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.queue, &self.idx];
        params.extend_from_slice(extra);
        self.tx.query(&statement, &params).await
    }

    async fn query_opt(
        &self,
        sql: &str,
        extra: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, PgError> {
        Ok(self.query(sql, extra).await?.into_iter().next())
    }

    async fn exec(&self, sql: &str, extra: &[&(dyn ToSql + Sync)]) -> Result<u64, PgError> {
        let statement = prepare(self.tx, self.cache, sql).await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.queue, &self.idx];
        params.extend_from_slice(extra);
        self.tx.execute(&statement, &params).await
    }

    async fn task(&self, id: &TaskId) -> Result<Option<TaskRow>, PgError> {
        Ok(self
            .query_opt(&self.sql.select_task, &[&id.as_str()])
            .await?
            .map(|row| TaskRow::from_row(&row)))
    }

    async fn done(&self, id: &TaskId) -> Result<Option<DoneRow>, PgError> {
        Ok(self
            .query_opt(&self.sql.select_done, &[&id.as_str()])
            .await?
            .map(|row| DoneRow {
                due_ms: from_db(row.get(0)),
                scheduled_due_ms: from_db(row.get(1)),
                attempt: u32::try_from(row.get::<_, i32>(2)).unwrap_or(0),
                generation: from_db(row.get(3)),
                completed_ms: from_db(row.get(4)),
            }))
    }

    async fn superseded_claim(&self, id: &TaskId) -> Result<Option<(u64, u64)>, PgError> {
        Ok(self
            .query_opt(&self.sql.select_superseded, &[&id.as_str()])
            .await?
            .map(|row| (from_db(row.get(0)), from_db(row.get(1)))))
    }

    async fn put_superseded(&self, id: &TaskId, claim: u64, lease: u64) -> Result<(), PgError> {
        self.exec(
            &self.sql.put_superseded,
            &[&id.as_str(), &to_db(claim), &to_db(lease)],
        )
        .await
        .map(|_| ())
    }

    async fn drop_superseded(&self, id: &TaskId) -> Result<(), PgError> {
        self.exec(&self.sql.delete_superseded, &[&id.as_str()])
            .await
            .map(|_| ())
    }

    async fn drop_done(&self, id: &TaskId) -> Result<(), PgError> {
        self.exec(&self.sql.delete_done, &[&id.as_str()])
            .await
            .map(|_| ())
    }

    async fn delete_task(&self, id: &TaskId) -> Result<(), PgError> {
        self.exec(&self.sql.delete_task, &[&id.as_str()])
            .await
            .map(|_| ())
    }

    /// Reads, in one statement, which of `ids` have a task row or a done record, and keeps
    /// the others as absent: a batch of new tasks is then scheduled with one write each
    /// instead of three reads and two writes. Every write of a partition's rows holds its
    /// lock, which this transaction holds, so what is absent stays absent until this
    /// transaction writes it (and [`Part::schedule`] forgets an id once it wrote it).
    pub(super) async fn learn_absent(&mut self, ids: &[&str]) -> Result<(), PgError> {
        let ids: Vec<&str> = ids.to_vec();
        let present: std::collections::HashSet<String> = self
            .query(&self.sql.present_ids, &[&ids])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        self.absent = ids
            .into_iter()
            .filter(|id| !present.contains(*id))
            .map(str::to_owned)
            .collect();
        Ok(())
    }

    /// Whether `(id, due)` completed less than `retention_ms` ago.
    async fn is_duplicate(&self, task: &NewTask, retention_ms: u64) -> Result<bool, PgError> {
        Ok(self.done(&task.id).await?.is_some_and(|done| {
            done.scheduled_due_ms == task.due_ms
                && self.now_ms.saturating_sub(done.completed_ms) < retention_ms
        }))
    }

    /// What scheduling `task` over what the partition holds of its id comes to: `Ok` the
    /// outcome of writing it (with a superseded claim recorded, a stale done record dropped),
    /// `Err` the answer without writing (kept, a duplicate).
    async fn existing_outcome(
        &mut self,
        task: &NewTask,
        mode: ScheduleMode,
        retention_ms: u64,
    ) -> Result<Result<ScheduleOutcome, ScheduleOutcome>, PgError> {
        let existing = self.task(&task.id).await?;
        Ok(Ok(match existing {
            Some(existing) if existing.generation == 0 => {
                if let Place::Inflight {
                    claim,
                    lease_deadline_ms,
                } = existing.place
                {
                    self.put_superseded(&task.id, claim, lease_deadline_ms)
                        .await?;
                }
                ScheduleOutcome::Created
            }
            Some(existing) if mode == ScheduleMode::IfAbsent => {
                return Ok(Err(ScheduleOutcome::Kept {
                    due_ms: existing.current_due_ms(),
                }))
            }
            Some(existing)
                if matches!(existing.place, Place::Inflight { .. })
                    && retention_ms > 0
                    && existing.scheduled_due_ms == task.due_ms =>
            {
                return Ok(Err(ScheduleOutcome::Duplicate))
            }
            Some(existing)
                if retention_ms > 0
                    && existing.scheduled_due_ms == task.due_ms
                    && match existing.place {
                        Place::Dead { .. } => true,
                        Place::Pending { .. } => existing.attempt > 1,
                        Place::Inflight { .. } => false,
                    } =>
            {
                return Ok(Err(ScheduleOutcome::Duplicate))
            }
            Some(existing)
                if match existing.place {
                    Place::Pending { at_ms } => mode.keeps_pending(at_ms, task.due_ms),
                    Place::Inflight { .. } => mode.keeps_inflight(existing.due_ms, task.due_ms),
                    Place::Dead { .. } => false,
                } =>
            {
                return Ok(Err(ScheduleOutcome::Kept {
                    due_ms: existing.current_due_ms(),
                }))
            }
            Some(existing) => {
                if let Place::Inflight {
                    claim,
                    lease_deadline_ms,
                } = existing.place
                {
                    self.put_superseded(&task.id, claim, lease_deadline_ms)
                        .await?;
                }
                ScheduleOutcome::Replaced {
                    previous_due_ms: existing.current_due_ms(),
                }
            }
            None if self.is_duplicate(task, retention_ms).await? => {
                return Ok(Err(ScheduleOutcome::Duplicate))
            }
            None => {
                self.drop_done(&task.id).await?;
                ScheduleOutcome::Created
            }
        }))
    }

    /// Schedules an already validated task (the memory twin's `schedule`).
    pub(super) async fn schedule(
        &mut self,
        task: &NewTask,
        mode: ScheduleMode,
        retention_ms: u64,
    ) -> Result<ScheduleOutcome, PgError> {
        // A new id (known absent under this lock): no row to read, no done record to drop.
        let outcome = if self.absent.remove(task.id.as_str()) {
            Ok(ScheduleOutcome::Created)
        } else {
            self.existing_outcome(task, mode, retention_ms).await?
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(answer) => return Ok(answer),
        };
        let generation = to_db(self.next_sequence());
        self.exec(
            &self.sql.put_pending,
            &[
                &task.id.as_str(),
                &to_db(task.due_ms),
                &generation,
                &task.payload.as_ref(),
                &task.traceparent.as_ref().map(TraceParent::as_str),
            ],
        )
        .await?;
        Ok(outcome)
    }

    /// Creates a recurring tick's task unless the ledger has its id.
    pub(super) async fn create_tick(
        &mut self,
        task: &NewTask,
        retention_ms: u64,
    ) -> Result<TickOutcome, PgError> {
        let exists = self
            .query_opt(&self.sql.tick_exists, &[&task.id.as_str()])
            .await?
            .is_some_and(|row| row.get::<_, bool>(0));
        if exists {
            return Ok(TickOutcome::AlreadyCreated);
        }
        self.exec(
            &self.sql.put_tick,
            &[&task.id.as_str(), &to_db(task.due_ms)],
        )
        .await?;
        Ok(
            match self
                .schedule(task, ScheduleMode::IfAbsent, retention_ms)
                .await?
            {
                ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. } => TickOutcome::Created,
                ScheduleOutcome::Kept { due_ms } => TickOutcome::Kept { due_ms },
                ScheduleOutcome::Duplicate => TickOutcome::Duplicate,
            },
        )
    }

    /// Removes ids from the tick ledger.
    pub(super) async fn forget_ticks(&self, ids: &[TaskId]) -> Result<(), PgError> {
        let ids: Vec<&str> = ids.iter().map(TaskId::as_str).collect();
        self.exec(&self.sql.forget_ticks, &[&ids]).await.map(|_| ())
    }

    /// Cancels a task.
    pub(super) async fn cancel(&self, id: &TaskId) -> Result<Cancel, PgError> {
        let Some(record) = self.task(id).await? else {
            return Ok(Cancel::NotFound);
        };
        if let Place::Inflight { .. } = record.place {
            self.exec(&self.sql.cancel_inflight, &[&id.as_str()])
                .await?;
            return Ok(Cancel::InFlight);
        }
        self.delete_task(id).await?;
        self.drop_superseded(id).await?;
        Ok(Cancel::Cancelled)
    }

    /// The task as `get` reports it.
    pub(super) async fn get(
        &self,
        id: &TaskId,
        retention_ms: u64,
    ) -> Result<Option<TaskInfo>, PgError> {
        if let Some(record) = self.task(id).await? {
            let (state, state_since_ms) = match record.place {
                Place::Pending { .. } => (TaskState::Pending, None),
                Place::Inflight {
                    lease_deadline_ms, ..
                } => (TaskState::Inflight, Some(lease_deadline_ms)),
                Place::Dead { failed_ms } => (TaskState::Dead, Some(failed_ms)),
            };
            return Ok(Some(TaskInfo {
                id: id.clone(),
                state,
                due_ms: record.current_due_ms(),
                attempt: record.attempt,
                generation: record.generation,
                payload: Bytes::from(record.payload),
                last_error: record.last_error,
                state_since_ms,
                traceparent: record.traceparent,
            }));
        }
        let Some(done) = self.done(id).await? else {
            return Ok(None);
        };
        Ok(
            (self.now_ms.saturating_sub(done.completed_ms) < retention_ms).then(|| TaskInfo {
                id: id.clone(),
                state: TaskState::Done,
                due_ms: done.due_ms,
                attempt: done.attempt,
                generation: done.generation,
                payload: Bytes::new(),
                last_error: None,
                state_since_ms: Some(done.completed_ms),
                traceparent: None,
            }),
        )
    }

    /// Moves up to `limit` due tasks in flight (at most `max_bytes` of payload, but at least
    /// one task) and keeps the claim's receipt.
    pub(super) async fn claim_due(
        &mut self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
        max_bytes: usize,
    ) -> Result<ClaimBatch, PgError> {
        let now_ms = now_ms.min(self.now_ms);
        let rows = self
            .query(&self.sql.due_tasks, &[&to_db(now_ms), &to_db(limit)])
            .await?;
        let mut tasks = Vec::with_capacity(rows.len());
        let mut bytes = 0usize;
        for row in rows {
            let payload: Vec<u8> = row.get(4);
            if !tasks.is_empty() && bytes + payload.len() > max_bytes {
                break;
            }
            // Rows this store wrote always hold a valid id; one written by outside tooling
            // that does not is left where it is rather than block the claim.
            let Ok(id) = TaskId::new(row.get::<_, &str>(0)) else {
                continue;
            };
            bytes += payload.len();
            let claim = self.next_sequence();
            tasks.push(claimed_task(partition, id, &row, 0, payload, claim));
        }
        let next_due_ms = if tasks.is_empty() {
            self.first_time(&self.sql.next_due, &[]).await?
        } else {
            let ids: Vec<&str> = tasks.iter().map(|task| task.id.as_str()).collect();
            let claims: Vec<i64> = tasks.iter().map(|task| to_db(task.token.claim)).collect();
            let lease = to_db(lease_deadline_ms);
            // The sequence is written here, so `finish` has nothing left to write.
            self.locked_sequence = self.sequence;
            let sequence = self.sequence;
            self.first_time(
                &self.sql.mark_claimed,
                &[&ids, &claims, &lease, &owner, &sequence],
            )
            .await?
        };
        Ok(ClaimBatch {
            tasks,
            next_due_ms,
            dead_lettered: Vec::new(),
            paused: false,
            held_back: 0,
        })
    }

    /// The tasks of the latest claim, if `owner` made it with `lease_deadline_ms`, still in
    /// flight under it.
    pub(super) async fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> Result<ClaimBatch, PgError> {
        let mut batch = ClaimBatch::default();
        let Some(row) = self.query_opt(&self.sql.select_receipt, &[]).await? else {
            return Ok(batch);
        };
        let (who, lease): (Option<String>, Option<i64>) = (row.get(0), row.get(1));
        if who.as_deref() != Some(owner) || lease != Some(to_db(lease_deadline_ms)) {
            return Ok(batch);
        }
        let ids: Vec<String> = row.get::<_, Option<Vec<String>>>(2).unwrap_or_default();
        let claims: Vec<i64> = row.get::<_, Option<Vec<i64>>>(3).unwrap_or_default();
        for (id, claimed) in ids.iter().zip(claims) {
            let Ok(id) = TaskId::new(id) else { continue };
            let Some(record) = self.task(&id).await? else {
                continue;
            };
            let held =
                matches!(record.place, Place::Inflight { claim, .. } if claim == from_db(claimed));
            if !held || record.generation == 0 {
                continue;
            }
            batch.tasks.push(ClaimedTask {
                token: LeaseToken {
                    partition: partition.clone(),
                    id: id.clone(),
                    generation: record.generation,
                    claim: from_db(claimed),
                },
                id,
                due_ms: record.due_ms,
                attempt: record.attempt,
                generation: record.generation,
                payload: Bytes::from(record.payload),
                traceparent: record.traceparent,
            });
        }
        Ok(batch)
    }

    async fn first_time(
        &self,
        sql: &str,
        extra: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<u64>, PgError> {
        Ok(self
            .query_opt(sql, extra)
            .await?
            .and_then(|row| row.get::<_, Option<i64>>(0))
            .map(from_db))
    }

    /// The pending `(id, due)` pairs in `from_ms..=to_ms`.
    pub(super) async fn peek_window(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<(TaskId, u64)>, PgError> {
        let rows = self
            .query(
                &self.sql.window,
                &[&to_db(from_ms), &to_db(to_ms), &to_db(limit)],
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let id = TaskId::new(row.get::<_, &str>(0)).ok()?;
                Some((id, from_db(row.get(1))))
            })
            .collect())
    }

    /// Sweep, prune, window, and when to look again; with the prune floor when it pruned
    /// all it could ([`Self::prune_done`]).
    pub(super) async fn look(
        &mut self,
        request: &LookRequest,
    ) -> Result<(LookReport, Option<u64>), PgError> {
        let requeued = self
            .requeue_expired(request.now_ms, request.requeue_limit)
            .await?;
        let (pruned, prune_floor) = match request.prune_before_ms {
            Some(before) => self.prune_done(before, request.prune_limit).await?,
            None => (0, None),
        };
        let limit = request.window_limit.max(1);
        let window = self.peek_window(0, request.window_end_ms, limit).await?;
        let next_due_after_window_ms = if window.len() < limit {
            self.first_time(&self.sql.next_due_after, &[&to_db(request.window_end_ms)])
                .await?
        } else {
            None
        };
        let report = LookReport {
            requeued,
            pruned,
            window,
            next_due_after_window_ms,
            earliest_lease_deadline_ms: self.first_time(&self.sql.earliest_lease, &[]).await?,
        };
        Ok((report, prune_floor))
    }

    fn lease_of(
        &self,
        token: &LeaseToken,
        record: Option<&TaskRow>,
        done: Option<&DoneRow>,
    ) -> Lease {
        match record {
            Some(record) if record.generation == 0 => match record.place {
                Place::Inflight { claim, .. } if claim == token.claim => Lease::Cancelled,
                _ => Lease::Stale,
            },
            Some(record) if record.generation != token.generation => Lease::Superseded,
            Some(record) => match record.place {
                Place::Inflight { claim, .. } if claim == token.claim => Lease::Held,
                _ => Lease::Stale,
            },
            None => match done {
                Some(done) if done.generation == token.generation => Lease::Stale,
                _ => Lease::Superseded,
            },
        }
    }

    /// The lease of `token` and the task's row; a superseded token's claim leaves flight.
    async fn check(&self, token: &LeaseToken) -> Result<(Lease, Option<TaskRow>), PgError> {
        let record = self.task(&token.id).await?;
        let done = match record {
            None => self.done(&token.id).await?,
            Some(_) => None,
        };
        let lease = self.lease_of(token, record.as_ref(), done.as_ref());
        if let Lease::Superseded = lease {
            if self
                .superseded_claim(&token.id)
                .await?
                .is_some_and(|(claim, _)| claim == token.claim)
            {
                self.drop_superseded(&token.id).await?;
            }
        }
        Ok((lease, record))
    }

    /// Completes the tasks behind `tokens` (a batch of concurrent acks of this partition):
    /// one statement for every token that holds its lease, then the others one by one, in
    /// order. `Ok(true)` completed, `Ok(false)` superseded, per token.
    pub(super) async fn ack_many(
        &self,
        tokens: &[LeaseToken],
        retention_ms: u64,
    ) -> Result<Vec<Result<bool, StaleLease>>, PgError> {
        let ids: Vec<&str> = tokens.iter().map(|token| token.id.as_str()).collect();
        let generations: Vec<i64> = tokens.iter().map(|token| to_db(token.generation)).collect();
        let claims: Vec<i64> = tokens.iter().map(|token| to_db(token.claim)).collect();
        let now = to_db(self.now_ms);
        let rows = if retention_ms == 0 {
            self.query(
                &self.sql.ack_held_unrecorded,
                &[&ids, &generations, &claims],
            )
            .await?
        } else {
            self.query(&self.sql.ack_held, &[&ids, &generations, &claims, &now])
                .await?
        };
        let mut completed: std::collections::HashSet<(String, i64, i64)> = rows
            .iter()
            .map(|row| {
                let claim: Option<i64> = row.get(2);
                (row.get(0), row.get(1), claim.unwrap_or(0))
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tokens.len());
        for token in tokens {
            // The token that held its task's lease was completed by the statement (a repeat
            // of it is answered by the full check, as an ack after that ack would be).
            let key = (
                token.id.as_str().to_owned(),
                to_db(token.generation),
                to_db(token.claim),
            );
            if completed.remove(&key) {
                outcomes.push(Ok(true));
            } else {
                outcomes.push(self.ack_checked(token, retention_ms).await?);
            }
        }
        Ok(outcomes)
    }

    /// Completes the task behind `token` by the full lease check (the memory twin's `ack`).
    async fn ack_checked(
        &self,
        token: &LeaseToken,
        retention_ms: u64,
    ) -> Result<Result<bool, StaleLease>, PgError> {
        let (lease, record) = self.check(token).await?;
        match lease {
            Lease::Stale => return Ok(Err(StaleLease)),
            Lease::Superseded => return Ok(Ok(false)),
            Lease::Cancelled => {
                self.delete_task(&token.id).await?;
                return Ok(Ok(false));
            }
            Lease::Held => {}
        }
        let Some(record) = record else {
            return Ok(Err(StaleLease));
        };
        self.delete_task(&token.id).await?;
        if retention_ms == 0 {
            self.drop_done(&token.id).await?;
            return Ok(Ok(true));
        }
        self.exec(
            &self.sql.put_done,
            &[
                &token.id.as_str(),
                &to_db(record.due_ms),
                &to_db(record.scheduled_due_ms),
                &i32::try_from(record.attempt).unwrap_or(i32::MAX),
                &to_db(record.generation),
                &to_db(self.now_ms),
            ],
        )
        .await?;
        Ok(Ok(true))
    }

    /// Records a failed attempt of the task behind `token`.
    pub(super) async fn fail(
        &self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
    ) -> Result<Result<FailOutcome, StaleLease>, PgError> {
        let (lease, record) = self.check(token).await?;
        match lease {
            Lease::Stale => return Ok(Err(StaleLease)),
            Lease::Superseded => return Ok(Ok(FailOutcome::Superseded)),
            Lease::Cancelled => {
                self.delete_task(&token.id).await?;
                return Ok(Ok(FailOutcome::Superseded));
            }
            Lease::Held => {}
        }
        let Some(record) = record else {
            return Ok(Err(StaleLease));
        };
        Ok(Ok(match action {
            FailAction::RetryAt(retry_ms) | FailAction::RequeueAt(retry_ms) => {
                let attempt = if matches!(action, FailAction::RetryAt(_)) {
                    record.attempt.saturating_add(1)
                } else {
                    record.attempt
                };
                let at = to_db(retry_ms);
                self.exec(
                    &self.sql.make_pending,
                    &[
                        &token.id.as_str(),
                        &at,
                        &at,
                        &i32::try_from(attempt).unwrap_or(i32::MAX),
                        &error,
                    ],
                )
                .await?;
                FailOutcome::Retrying {
                    attempt,
                    due_ms: retry_ms,
                }
            }
            FailAction::DeadLetter => {
                self.exec(
                    &self.sql.make_dead,
                    &[&token.id.as_str(), &to_db(self.now_ms), &error],
                )
                .await?;
                FailOutcome::DeadLettered
            }
        }))
    }

    /// Moves the lease deadline of the task behind `token`.
    pub(super) async fn renew(
        &self,
        token: &LeaseToken,
        lease_deadline_ms: u64,
    ) -> Result<Result<(), StaleLease>, PgError> {
        let record = self.task(&token.id).await?;
        let done = match record {
            None => self.done(&token.id).await?,
            Some(_) => None,
        };
        if !matches!(
            self.lease_of(token, record.as_ref(), done.as_ref()),
            Lease::Held | Lease::Cancelled
        ) {
            return Ok(Err(StaleLease));
        }
        if !matches!(record.map(|r| r.place), Some(Place::Inflight { .. })) {
            return Ok(Err(StaleLease));
        }
        self.exec(
            &self.sql.renew,
            &[&token.id.as_str(), &to_db(lease_deadline_ms)],
        )
        .await?;
        Ok(Ok(()))
    }

    /// Puts back up to `limit` leases that ran out before `now_ms` (the database clock if
    /// earlier): their tasks pending at once, same attempt; a superseded claim's lease is
    /// only dropped; a task cancelled while it ran is forgotten.
    pub(super) async fn requeue_expired(
        &self,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<TaskId>, PgError> {
        let now_ms = now_ms.min(self.now_ms);
        let rows = self
            .query(&self.sql.expired_leases, &[&to_db(now_ms), &to_db(limit)])
            .await?;
        let mut requeued = Vec::new();
        for row in rows {
            let Ok(id) = TaskId::new(row.get::<_, &str>(0)) else {
                continue;
            };
            if row.get::<_, bool>(2) {
                self.drop_superseded(&id).await?;
                continue;
            }
            let Some(record) = self.task(&id).await? else {
                continue;
            };
            if record.generation == 0 {
                self.delete_task(&id).await?;
            } else {
                let at = to_db(now_ms);
                self.exec(
                    &self.sql.make_pending,
                    &[
                        &id.as_str(),
                        &at,
                        &to_db(record.due_ms),
                        &i32::try_from(record.attempt).unwrap_or(i32::MAX),
                        &record.last_error,
                    ],
                )
                .await?;
                requeued.push(id);
            }
        }
        Ok(requeued)
    }

    /// Forgets up to `limit` done records completed before `older_than_ms`: how many went,
    /// and, when that was all of them, the partition's prune floor (no record of it is
    /// completed before it: the earliest left, or the database clock when none is left).
    pub(super) async fn prune_done(
        &self,
        older_than_ms: u64,
        limit: usize,
    ) -> Result<(u64, Option<u64>), PgError> {
        let rows = self
            .query(
                &self.sql.prune_done,
                &[&to_db(older_than_ms), &to_db(limit)],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok((0, None));
        };
        let pruned = from_db(row.get::<_, i64>(0));
        let floor = (pruned < limit as u64).then(|| {
            from_db(
                row.get::<_, Option<i64>>(1)
                    .unwrap_or_else(|| row.get::<_, i64>(2)),
            )
        });
        Ok((pruned, floor))
    }

    /// The partition's counts.
    pub(super) async fn stats(&self, now_ms: u64) -> Result<PartitionStats, PgError> {
        let rows = self.query(&self.sql.stats, &[&to_db(now_ms)]).await?;
        let Some(row) = rows.first() else {
            return Ok(PartitionStats::default());
        };
        Ok(PartitionStats {
            pending: from_db(row.get(0)),
            due_now: from_db(row.get(1)),
            inflight: from_db(row.get(2)),
            dead: from_db(row.get(3)),
            done: from_db(row.get(4)),
            // No per-key limits on this backend yet: nothing is held back.
            held_back: 0,
        })
    }

    /// Up to `limit` dead letters, oldest first.
    pub(super) async fn list_dead(&self, limit: usize) -> Result<Vec<DeadTask>, PgError> {
        let rows = self.query(&self.sql.list_dead, &[&to_db(limit)]).await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                Some(DeadTask {
                    id: TaskId::new(row.get::<_, &str>(0)).ok()?,
                    due_ms: from_db(row.get(1)),
                    attempt: u32::try_from(row.get::<_, i32>(2)).unwrap_or(0),
                    failed_ms: from_db(row.get(3)),
                    last_error: row.get(4),
                    payload: Bytes::from(row.get::<_, Vec<u8>>(5)),
                })
            })
            .collect())
    }

    /// The `(id, failed_ms)` of up to `limit` dead letters, oldest first.
    pub(super) async fn peek_dead(&self, limit: usize) -> Result<Vec<(TaskId, u64)>, PgError> {
        let rows = self.query(&self.sql.peek_dead, &[&to_db(limit)]).await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                Some((
                    TaskId::new(row.get::<_, &str>(0)).ok()?,
                    from_db(row.get(1)),
                ))
            })
            .collect())
    }

    /// Makes a dead letter pending at `due_ms` with attempt 1.
    pub(super) async fn retry_dead(&self, id: &TaskId, due_ms: u64) -> Result<bool, PgError> {
        Ok(self
            .exec(&self.sql.retry_dead, &[&id.as_str(), &to_db(due_ms)])
            .await?
            > 0)
    }

    /// Deletes one dead letter, or all of them.
    pub(super) async fn purge_dead(&self, id: Option<&TaskId>) -> Result<u64, PgError> {
        let ids: Vec<TaskId> = match id {
            Some(id) => match self.task(id).await? {
                Some(record) if matches!(record.place, Place::Dead { .. }) => vec![id.clone()],
                _ => Vec::new(),
            },
            None => self
                .query(&self.sql.dead_ids, &[])
                .await?
                .iter()
                .filter_map(|row| TaskId::new(row.get::<_, &str>(0)).ok())
                .collect(),
        };
        for id in &ids {
            self.cancel(id).await?;
        }
        Ok(ids.len() as u64)
    }
}
