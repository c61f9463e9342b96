//! [`TaskStore`] for [`PostgresStore`]: each partition operation is one transaction on the
//! locked partition ([`Part`]); queue-wide controls lock what they count.

use async_trait::async_trait;
use delayq_postgres::tokio_postgres::Error as PgError;
use futures::future::BoxFuture;
use futures::StreamExt;

use super::partition::{Part, StaleLease};
use super::{from_db, from_layer, to_db, PostgresStore};
use crate::error::{StorageError, StorageResult};
use crate::flow::{FlowLimits, HeldKey, QueueLayout};
use crate::model::{
    validate_due, AckOutcome, Cancel, ClaimBatch, DeadTask, FailAction, FailOutcome, LeaseToken,
    LookReport, LookRequest, NewTask, Partition, PartitionStats, QueueName, ScheduleMode,
    ScheduleOutcome, TaskId, TaskInfo,
};
use crate::store::{ItemResult, TaskStore};

/// The most partitions a queue may have (as every backend).
const MAX_PARTITIONS: u32 = 65_536;

/// The longest last-error text kept, in bytes (as every backend).
const MAX_ERROR_BYTES: usize = 4096;

fn bounded_error(error: &str) -> &str {
    let mut end = error.len().min(MAX_ERROR_BYTES);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

fn stale(token: &LeaseToken) -> impl FnOnce(StaleLease) -> StorageError + '_ {
    move |StaleLease| StorageError::StaleLease {
        partition: token.partition.to_string(),
        id: token.id.to_string(),
    }
}

/// The most items of one partition `schedule_many` writes in one transaction (a bound on how
/// long the partition stays locked).
const SCHEDULE_CHUNK: usize = 256;

/// How many partitions' chunks one `schedule_many` writes at once (each on its own pooled
/// connection; the default pool has 16).
const SCHEDULE_PARTITIONS_AT_ONCE: usize = 8;

/// The key of the advisory lock that serializes a queue's global slots.
fn slots_lock_key(queue: &QueueName) -> i64 {
    crate::hash::stable_hash(format!("delayq.global_slots.{queue}").as_bytes()) as i64
}

impl PostgresStore {
    /// Runs `work` on `partition` locked, in one transaction (retried whole on a transient
    /// failure). Fails with `NoSuchPartition` when the queue has fewer partitions.
    pub(super) async fn in_partition<T, F>(
        &self,
        operation: &'static str,
        partition: &Partition,
        work: F,
    ) -> StorageResult<T>
    where
        T: Send + 'static,
        F: for<'p, 't, 'x> Fn(&'p mut Part<'t, 'x>) -> BoxFuture<'p, Result<T, PgError>>
            + Send
            + Sync
            + Clone
            + 'static,
    {
        let sql = self.inner.sql.clone();
        let written = partition;
        let partition = partition.clone();
        let outcome = self
            .inner
            .database
            .transaction(operation, move |tx| {
                let work = work.clone();
                let sql = sql.clone();
                let partition = partition.clone();
                Box::pin(async move {
                    let mut part =
                        match Part::lock(tx, Some(&tx.statement_cache), sql, &partition).await? {
                            Ok(part) => part,
                            Err(refused) => return Ok(Err(refused)),
                        };
                    let value = work(&mut part).await?;
                    part.finish().await?;
                    Ok(Ok(value))
                })
            })
            .await
            .map_err(|error| from_layer(operation, error));
        // Whatever the transaction did, the light looks' view of this partition may be stale.
        self.inner.heads.forget(written);
        outcome?
    }

    /// Runs `work` in a transaction of its own (for what spans no partition).
    async fn in_transaction<T, F>(&self, operation: &'static str, work: F) -> StorageResult<T>
    where
        T: Send + 'static,
        F: for<'t, 'x> Fn(
                &'t delayq_postgres::deadpool_postgres::Transaction<'x>,
                String,
            ) -> BoxFuture<'t, Result<T, PgError>>
            + Send
            + Sync
            + Clone
            + 'static,
    {
        let schema = self.inner.database.schema().quoted().to_owned();
        self.inner
            .database
            .transaction(operation, move |tx| {
                let work = work.clone();
                let schema = schema.clone();
                Box::pin(async move { work(tx, schema).await })
            })
            .await
            .map_err(|error| from_layer(operation, error))
    }

    pub(super) fn validate(&self, task: &NewTask) -> StorageResult<()> {
        let max = self.inner.options.max_payload;
        if task.payload.len() > max {
            return Err(StorageError::PayloadTooLarge {
                id: task.id.to_string(),
                size: task.payload.len(),
                max,
            });
        }
        validate_due(task.due_ms)?;
        Ok(())
    }

    async fn schedule_one(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.validate(&task)?;
        let retention = self.inner.options.executed_retention_ms;
        self.in_partition("schedule", partition, move |part| {
            let task = task.clone();
            Box::pin(async move { part.schedule(&task, mode, retention).await })
        })
        .await
    }

    /// Writes the items of `schedule_many` that fall into one partition, in chunks of at
    /// most [`SCHEDULE_CHUNK`] one after the other, each in one transaction on the locked
    /// partition: one read learns which ids are new, then each item is scheduled. Hands back
    /// each chunk's item indexes with its outcomes (in order) or the one error that failed
    /// its transaction.
    async fn schedule_group(
        &self,
        partition: Partition,
        group: Vec<(usize, NewTask)>,
        mode: ScheduleMode,
        retention: u64,
    ) -> Vec<(Vec<usize>, StorageResult<Vec<ScheduleOutcome>>)> {
        let mut written = Vec::new();
        for chunk in group.chunks(SCHEDULE_CHUNK) {
            let (indexes, tasks): (Vec<usize>, Vec<NewTask>) = chunk.iter().cloned().unzip();
            let outcome = self
                .schedule_chunk(&partition, tasks, mode, retention)
                .await;
            written.push((indexes, outcome));
        }
        written
    }

    /// One chunk of [`Self::schedule_group`] in one transaction.
    async fn schedule_chunk(
        &self,
        partition: &Partition,
        tasks: Vec<NewTask>,
        mode: ScheduleMode,
        retention: u64,
    ) -> StorageResult<Vec<ScheduleOutcome>> {
        self.in_partition("schedule_many", partition, move |part| {
            let tasks = tasks.clone();
            Box::pin(async move {
                let ids: Vec<&str> = tasks.iter().map(|task| task.id.as_str()).collect();
                part.learn_absent(&ids).await?;
                let mut outcomes = Vec::with_capacity(tasks.len());
                for task in &tasks {
                    outcomes.push(part.schedule(task, mode, retention).await?);
                }
                Ok(outcomes)
            })
        })
        .await
    }

    /// Acks `tokens` of `partition`: one statement, and one transaction for the tokens it did
    /// not complete; one result per token, in order.
    async fn ack_batch(
        &self,
        partition: Partition,
        tokens: Vec<LeaseToken>,
    ) -> Vec<StorageResult<AckOutcome>> {
        let retention = self.retention_ms();
        // The common case, every token still holding its task's lease, is one statement
        // committed on its own; the tokens it did not complete (superseded, stale, a repeat)
        // get the full check in the partition's transaction. The statement may run twice (a
        // lost reply is tried again): a token it completed the first time is answered by the
        // full check the second, as a repeated ack is.
        let mut held = match self.ack_at_once(&partition, &tokens, retention).await {
            Ok(held) => held,
            Err(error) => return tokens.iter().map(|_| Err(error.copy_for("ack"))).collect(),
        };
        // A token sent twice in one batch is completed once; its repeat gets the full check.
        let completed: Vec<bool> = tokens
            .iter()
            .map(|token| held.remove(&key_of(token)))
            .collect();
        let rest: Vec<LeaseToken> = tokens
            .iter()
            .zip(&completed)
            .filter(|(_, &done)| !done)
            .map(|(token, _)| token.clone())
            .collect();
        let mut checked = self
            .ack_checked(&partition, rest, retention)
            .await
            .into_iter();
        completed
            .into_iter()
            .map(|done| {
                if done {
                    return Ok(AckOutcome::Completed);
                }
                checked.next().unwrap_or_else(|| {
                    Err(StorageError::Backend {
                        operation: "ack",
                        message: "an ack was not answered".to_owned(),
                    })
                })
            })
            .collect()
    }

    /// The full check of each of `tokens` in the partition's transaction (a superseded,
    /// cancelled or stale lease, a repeated ack), in their order.
    async fn ack_checked(
        &self,
        partition: &Partition,
        tokens: Vec<LeaseToken>,
        retention: u64,
    ) -> Vec<StorageResult<AckOutcome>> {
        if tokens.is_empty() {
            return Vec::new();
        }
        let owned = tokens.clone();
        let checked = self
            .in_partition("ack", partition, move |part| {
                let tokens = owned.clone();
                Box::pin(async move { part.ack_many(&tokens, retention).await })
            })
            .await;
        match checked {
            Ok(checked) => checked
                .into_iter()
                .zip(&tokens)
                .map(|(outcome, token)| match outcome {
                    Ok(true) => Ok(AckOutcome::Completed),
                    Ok(false) => Ok(AckOutcome::Superseded),
                    Err(refused) => Err(stale(token)(refused)),
                })
                .collect(),
            Err(error) => tokens.iter().map(|_| Err(error.copy_for("ack"))).collect(),
        }
    }

    /// Completes, in one statement, the tokens that still hold their task's lease; returns
    /// their keys. Nothing when the partition's row does not exist yet.
    async fn ack_at_once(
        &self,
        partition: &Partition,
        tokens: &[LeaseToken],
        retention_ms: u64,
    ) -> StorageResult<std::collections::HashSet<(String, i64, i64)>> {
        let sql = self.sql();
        let queue = partition.queue.as_str().to_owned();
        let idx = i32::try_from(partition.index).unwrap_or(i32::MAX);
        let ids: Vec<String> = tokens
            .iter()
            .map(|token| token.id.as_str().to_owned())
            .collect();
        let generations: Vec<i64> = tokens.iter().map(|token| to_db(token.generation)).collect();
        let claims: Vec<i64> = tokens.iter().map(|token| to_db(token.claim)).collect();
        let rows = self
            .inner
            .database
            .run("ack", move |client| {
                let sql = sql.clone();
                let (queue, ids, generations, claims) = (
                    queue.clone(),
                    ids.clone(),
                    generations.clone(),
                    claims.clone(),
                );
                Box::pin(async move {
                    let text = if retention_ms == 0 {
                        &sql.ack_held_unrecorded_at_once
                    } else {
                        &sql.ack_held_at_once
                    };
                    let statement = client.prepare_cached(text).await?;
                    client
                        .query(&statement, &[&queue, &idx, &ids, &generations, &claims])
                        .await
                })
            })
            .await;
        self.inner.heads.forget(partition);
        let rows = rows.map_err(|error| from_layer("ack", error))?;
        Ok(rows
            .iter()
            .map(|row| {
                let claim: Option<i64> = row.get(2);
                (row.get(0), row.get(1), claim.unwrap_or(0))
            })
            .collect())
    }

    pub(super) fn retention_ms(&self) -> u64 {
        self.inner.options.executed_retention_ms
    }

    pub(super) fn max_payload(&self) -> usize {
        self.inner.options.max_payload
    }
}

/// A token as the ack statements return what they completed: id, generation, claim.
fn key_of(token: &LeaseToken) -> (String, i64, i64) {
    (
        token.id.as_str().to_owned(),
        to_db(token.generation),
        to_db(token.claim),
    )
}

/// How many times one claim is sent when it fails transiently and its receipt shows that it
/// did not run.
const CLAIM_ATTEMPTS: u32 = 3;

#[async_trait]
impl TaskStore for PostgresStore {
    async fn register_layout(
        &self,
        queue: &QueueName,
        partitions: u32,
        flow_keys: Option<bool>,
    ) -> StorageResult<QueueLayout> {
        // Flow keys are not built on PostgreSQL yet: a queue here never has them, and asking
        // for them is refused rather than ignored (keyed ids would be spread over every
        // partition).
        if flow_keys == Some(true) {
            return Err(StorageError::Unsupported {
                what: "flow_keys",
                backend: "PostgreSQL",
            });
        }
        self.register_partitions(queue, partitions)
            .await
            .map(QueueLayout::plain)
    }

    async fn queue_layouts(&self) -> StorageResult<Vec<(QueueName, QueueLayout)>> {
        Ok(self
            .registered_queues()
            .await?
            .into_iter()
            .map(|(queue, partitions)| (queue, QueueLayout::plain(partitions)))
            .collect())
    }

    async fn set_flow_limits(&self, queue: &QueueName, limits: FlowLimits) -> StorageResult<()> {
        limits.validate()?;
        if limits.is_unlimited() {
            return Ok(());
        }
        // No queue of this backend has flow keys (register_layout refuses them).
        let _ = queue;
        Err(StorageError::Unsupported {
            what: "per-key limits (per_key_concurrency, per_key_rate, per_key_order)",
            backend: "PostgreSQL",
        })
    }

    async fn held_keys(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<HeldKey>> {
        // Nothing is ever held back by a key here (set_flow_limits refuses limits).
        let _ = (partition, limit);
        Ok(Vec::new())
    }

    async fn schedule(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.schedule_one(partition, task, mode).await
    }

    async fn schedule_many(
        &self,
        items: Vec<(Partition, NewTask)>,
        mode: ScheduleMode,
    ) -> StorageResult<Vec<ItemResult>> {
        // Valid items grouped by partition, each group (in chunks) one transaction on its
        // locked partition; results go back in the order given.
        let mut results: Vec<Option<ItemResult>> = (0..items.len()).map(|_| None).collect();
        let mut groups: std::collections::BTreeMap<Partition, Vec<(usize, NewTask)>> =
            std::collections::BTreeMap::new();
        for (index, (partition, task)) in items.into_iter().enumerate() {
            match self.validate(&task) {
                Ok(()) => groups.entry(partition).or_default().push((index, task)),
                Err(error) => results[index] = Some(Err(error)),
            }
        }
        let retention = self.retention_ms();
        // Each partition's chunks follow each other in order (a later item for an id must
        // see the earlier one), and up to SCHEDULE_PARTITIONS_AT_ONCE partitions are written
        // at once on the pool's connections, so a load spread over many partitions waits for
        // one round trip per step, not one per partition. No transaction locks two
        // partitions, so they cannot deadlock.
        let written = futures::stream::iter(
            groups
                .into_iter()
                .map(|(partition, group)| self.schedule_group(partition, group, mode, retention)),
        )
        .buffer_unordered(SCHEDULE_PARTITIONS_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .flatten();
        for (chunk, outcome) in written {
            match outcome {
                Ok(outcomes) => {
                    for (index, outcome) in chunk.into_iter().zip(outcomes) {
                        results[index] = Some(Ok(outcome));
                    }
                }
                Err(error) => {
                    for index in chunk {
                        results[index] = Some(Err(error.copy_for("schedule_many")));
                    }
                }
            }
        }
        Ok(results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(StorageError::Backend {
                        operation: "schedule_many",
                        message: "an item was not scheduled".to_owned(),
                    })
                })
            })
            .collect())
    }

    async fn cancel(&self, partition: &Partition, id: &TaskId) -> StorageResult<Cancel> {
        let id = id.clone();
        self.in_partition("cancel", partition, move |part| {
            let id = id.clone();
            Box::pin(async move { part.cancel(&id).await })
        })
        .await
    }

    async fn get(&self, partition: &Partition, id: &TaskId) -> StorageResult<Option<TaskInfo>> {
        let id = id.clone();
        let retention = self.retention_ms();
        self.in_partition("get", partition, move |part| {
            let id = id.clone();
            Box::pin(async move { part.get(&id, retention).await })
        })
        .await
    }

    async fn claim_due(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<ClaimBatch> {
        // Sent once per attempt; after a transient failure the receipt tells whether the
        // claim ran (its tasks come back with the lost reply's tokens) or not (send it again).
        let mut attempt = 1;
        loop {
            match self
                .claim_at_once(partition, now_ms, limit, lease_deadline_ms, owner)
                .await
            {
                Ok(Some(batch)) => return Ok(batch),
                Ok(None) => break,
                Err(error) if error.is_transient() && attempt < CLAIM_ATTEMPTS => {
                    let recovered = self
                        .recover_claim(partition, owner, lease_deadline_ms)
                        .await?;
                    if !recovered.tasks.is_empty() {
                        return Ok(recovered);
                    }
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
        // The partition's row does not exist yet: the transaction makes it.
        let owner = owner.to_owned();
        let max_bytes = self.inner.options.max_claim_bytes;
        let target = partition.clone();
        self.in_partition("claim_due", partition, move |part| {
            let owner = owner.clone();
            let target = target.clone();
            Box::pin(async move {
                // Read under the partition's lock: a pause that committed is seen (set_paused
                // locks every partition of the queue).
                if part.paused {
                    return Ok(ClaimBatch {
                        paused: true,
                        ..ClaimBatch::default()
                    });
                }
                part.claim_due(&target, now_ms, limit, lease_deadline_ms, &owner, max_bytes)
                    .await
            })
        })
        .await
    }

    async fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> StorageResult<ClaimBatch> {
        let owner = owner.to_owned();
        let target = partition.clone();
        self.in_partition("recover_claim", partition, move |part| {
            let owner = owner.clone();
            let target = target.clone();
            Box::pin(async move { part.recover_claim(&target, &owner, lease_deadline_ms).await })
        })
        .await
    }

    async fn peek_window(
        &self,
        partition: &Partition,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        // A plain read, without the partition's lock (as Redis's ZRANGEBYSCORE): an idle
        // partition's light look is this one statement, and it writes nothing (a row lock
        // would dirty the partition's row, and WAL, on every look).
        let sql = self.inner.sql.clone();
        let queue = partition.queue.as_str().to_owned();
        let idx = i32::try_from(partition.index).unwrap_or(i32::MAX);
        let params = (to_db(from_ms), to_db(to_ms), to_db(limit));
        let rows = self
            .inner
            .database
            .run("peek_window", move |client| {
                let sql = sql.clone();
                let queue = queue.clone();
                Box::pin(async move {
                    let statement = client.prepare_cached(&sql.window).await?;
                    client
                        .query(&statement, &[&queue, &idx, &params.0, &params.1, &params.2])
                        .await
                })
            })
            .await
            .map_err(|error| from_layer("peek_window", error))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let id = TaskId::new(row.get::<_, &str>(0)).ok()?;
                Some((id, from_db(row.get(1))))
            })
            .collect())
    }

    async fn pending_head(&self, partition: &Partition) -> StorageResult<Option<u64>> {
        self.inner.heads.head(self, partition).await
    }

    async fn look(
        &self,
        partition: &Partition,
        request: &LookRequest,
    ) -> StorageResult<LookReport> {
        let mut request = request.clone();
        if let Some(before) = request.prune_before_ms {
            if !self.inner.prune_floors.may_prune(partition, before) {
                request.prune_before_ms = None;
            }
        }
        // Nothing to prune: one read answers, unless it finds a change to make (look.rs).
        if request.prune_before_ms.is_none() {
            if let Some(report) = self.look_at_once(partition, &request).await? {
                return Ok(report);
            }
        }
        let (report, floor) = self
            .in_partition("look", partition, move |part| {
                let request = request.clone();
                Box::pin(async move { part.look(&request).await })
            })
            .await?;
        if let Some(floor) = floor {
            self.inner.prune_floors.set(partition, floor);
        }
        Ok(report)
    }

    async fn ack(&self, token: &LeaseToken) -> StorageResult<AckOutcome> {
        let store = self.clone();
        self.inner
            .acks
            .submit(
                "ack",
                token.partition.clone(),
                token.clone(),
                move |partition, tokens| {
                    let store = store.clone();
                    async move { store.ack_batch(partition, tokens).await }
                },
            )
            .await
    }

    async fn fail(
        &self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
    ) -> StorageResult<FailOutcome> {
        if let Some(due_ms) = action.due_ms() {
            validate_due(due_ms)?;
        }
        let error = bounded_error(error).to_owned();
        let owned = token.clone();
        let outcome = self
            .in_partition("fail", &token.partition, move |part| {
                let token = owned.clone();
                let error = error.clone();
                Box::pin(async move { part.fail(&token, &error, action).await })
            })
            .await?;
        outcome.map_err(stale(token))
    }

    async fn renew(&self, token: &LeaseToken, lease_deadline_ms: u64) -> StorageResult<()> {
        let owned = token.clone();
        let renewed = self
            .in_partition("renew", &token.partition, move |part| {
                let token = owned.clone();
                Box::pin(async move { part.renew(&token, lease_deadline_ms).await })
            })
            .await?;
        renewed.map_err(stale(token))
    }

    async fn requeue_expired(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<TaskId>> {
        self.in_partition("requeue_expired", partition, move |part| {
            Box::pin(async move { part.requeue_expired(now_ms, limit).await })
        })
        .await
    }

    async fn prune_done(
        &self,
        partition: &Partition,
        older_than_ms: u64,
        limit: usize,
    ) -> StorageResult<u64> {
        if !self.inner.prune_floors.may_prune(partition, older_than_ms) {
            return Ok(0);
        }
        let (pruned, floor) = self
            .in_partition("prune_done", partition, move |part| {
                Box::pin(async move { part.prune_done(older_than_ms, limit).await })
            })
            .await?;
        if let Some(floor) = floor {
            self.inner.prune_floors.set(partition, floor);
        }
        Ok(pruned)
    }

    async fn stats(&self, partition: &Partition, now_ms: u64) -> StorageResult<PartitionStats> {
        self.in_partition("stats", partition, move |part| {
            Box::pin(async move { part.stats(now_ms).await })
        })
        .await
    }

    async fn list_dead(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<DeadTask>> {
        self.in_partition("list_dead", partition, move |part| {
            Box::pin(async move { part.list_dead(limit).await })
        })
        .await
    }

    async fn peek_dead(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        self.in_partition("peek_dead", partition, move |part| {
            Box::pin(async move { part.peek_dead(limit).await })
        })
        .await
    }

    async fn retry_dead(
        &self,
        partition: &Partition,
        id: &TaskId,
        due_ms: u64,
    ) -> StorageResult<bool> {
        validate_due(due_ms)?;
        let id = id.clone();
        self.in_partition("retry_dead", partition, move |part| {
            let id = id.clone();
            Box::pin(async move { part.retry_dead(&id, due_ms).await })
        })
        .await
    }

    async fn set_paused(
        &self,
        queue: &QueueName,
        _partitions: u32,
        paused: bool,
    ) -> StorageResult<()> {
        let name = queue.as_str().to_owned();
        self.in_transaction("set_paused", move |tx, schema| {
            let name = name.clone();
            Box::pin(async move {
                if paused {
                    tx.execute(
                        &format!(
                            "INSERT INTO {schema}.paused (queue, paused_ms) VALUES \
                             ($1, (extract(epoch FROM clock_timestamp()) * 1000)::int8) \
                             ON CONFLICT DO NOTHING"
                        ),
                        &[&name],
                    )
                    .await?;
                    // Wait for claims in progress, and mark every partition's row: once this
                    // commits, every claim that takes a partition's lock sees the pause, even
                    // one that started before and waited for the lock (it reads the row as
                    // this left it, the other tables as of its start: migration 5).
                    tx.execute(
                        &format!("UPDATE {schema}.partitions SET paused = true WHERE queue = $1"),
                        &[&name],
                    )
                    .await?;
                } else {
                    tx.execute(
                        &format!("DELETE FROM {schema}.paused WHERE queue = $1"),
                        &[&name],
                    )
                    .await?;
                    tx.execute(
                        &format!("UPDATE {schema}.partitions SET paused = false WHERE queue = $1"),
                        &[&name],
                    )
                    .await?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn paused_queues(&self) -> StorageResult<Vec<(QueueName, u64)>> {
        let rows: Vec<(String, i64)> = self
            .in_transaction("paused_queues", |tx, schema| {
                Box::pin(async move {
                    let rows = tx
                        .query(
                            &format!("SELECT queue, paused_ms FROM {schema}.paused ORDER BY queue"),
                            &[],
                        )
                        .await?;
                    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
                })
            })
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(name, since)| Some((QueueName::new(name).ok()?, from_db(since))))
            .collect())
    }

    async fn take_rate_tokens(
        &self,
        queue: &QueueName,
        window_start_ms: u64,
        period_ms: u64,
        limit: u64,
        wanted: u64,
    ) -> StorageResult<u64> {
        let name = queue.as_str().to_owned();
        let horizon = to_db(window_start_ms.saturating_sub(period_ms.saturating_mul(2)));
        let start = to_db(window_start_ms);
        self.in_transaction("take_rate_tokens", move |tx, schema| {
            let name = name.clone();
            Box::pin(async move {
                // Windows older than two periods are forgotten (the Redis counters expire).
                tx.execute(
                    &format!(
                        "DELETE FROM {schema}.rate_windows WHERE queue = $1 AND window_start_ms < $2"
                    ),
                    &[&name, &horizon],
                )
                .await?;
                tx.execute(
                    &format!(
                        "INSERT INTO {schema}.rate_windows (queue, window_start_ms, taken) \
                         VALUES ($1, $2, 0) ON CONFLICT DO NOTHING"
                    ),
                    &[&name, &start],
                )
                .await?;
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT taken FROM {schema}.rate_windows \
                             WHERE queue = $1 AND window_start_ms = $2 FOR UPDATE"
                        ),
                        &[&name, &start],
                    )
                    .await?;
                let used = from_db(row.get(0));
                let grant = wanted.min(limit.saturating_sub(used));
                if grant > 0 {
                    tx.execute(
                        &format!(
                            "UPDATE {schema}.rate_windows SET taken = taken + $3 \
                             WHERE queue = $1 AND window_start_ms = $2"
                        ),
                        &[&name, &start, &to_db(grant)],
                    )
                    .await?;
                }
                Ok(grant)
            })
        })
        .await
    }

    async fn acquire_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        limit: u64,
        wanted: u64,
        lease_ms: u64,
    ) -> StorageResult<u64> {
        let name = queue.as_str().to_owned();
        let node = node.to_owned();
        let key = slots_lock_key(queue);
        self.in_transaction("acquire_global_slots", move |tx, schema| {
            let name = name.clone();
            let node = node.clone();
            Box::pin(async move {
                let row = tx
                    .query_one(
                        "SELECT pg_advisory_xact_lock($1), \
                         (extract(epoch FROM clock_timestamp()) * 1000)::int8",
                        &[&key],
                    )
                    .await?;
                let now: i64 = row.get(1);
                tx.execute(
                    &format!(
                        "DELETE FROM {schema}.global_slots WHERE queue = $1 AND lease_deadline_ms <= $2"
                    ),
                    &[&name, &now],
                )
                .await?;
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT coalesce(sum(held), 0)::int8, \
                             bool_or(node = $2) IS TRUE FROM {schema}.global_slots WHERE queue = $1"
                        ),
                        &[&name, &node],
                    )
                    .await?;
                let held = from_db(row.get(0));
                let holds: bool = row.get(1);
                let grant = wanted.min(limit.saturating_sub(held));
                if grant > 0 || holds {
                    tx.execute(
                        &format!(
                            "INSERT INTO {schema}.global_slots (queue, node, held, lease_deadline_ms) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT (queue, node) DO UPDATE \
                             SET held = {schema}.global_slots.held + $3, lease_deadline_ms = $4"
                        ),
                        &[&name, &node, &to_db(grant), &(now + to_db(lease_ms))],
                    )
                    .await?;
                }
                Ok(grant)
            })
        })
        .await
    }

    async fn release_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        count: u64,
    ) -> StorageResult<()> {
        let name = queue.as_str().to_owned();
        let node = node.to_owned();
        let key = slots_lock_key(queue);
        self.in_transaction("release_global_slots", move |tx, schema| {
            let name = name.clone();
            let node = node.clone();
            Box::pin(async move {
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).await?;
                tx.execute(
                    &format!(
                        "UPDATE {schema}.global_slots SET held = greatest(held - $3, 0) \
                         WHERE queue = $1 AND node = $2"
                    ),
                    &[&name, &node, &to_db(count)],
                )
                .await?;
                tx.execute(
                    &format!(
                        "DELETE FROM {schema}.global_slots WHERE queue = $1 AND node = $2 AND held = 0"
                    ),
                    &[&name, &node],
                )
                .await?;
                Ok(())
            })
        })
        .await
    }

    async fn purge_dead(&self, partition: &Partition, id: Option<&TaskId>) -> StorageResult<u64> {
        let id = id.cloned();
        self.in_partition("purge_dead", partition, move |part| {
            let id = id.clone();
            Box::pin(async move { part.purge_dead(id.as_ref()).await })
        })
        .await
    }

    async fn delete_queue(&self, queue: &QueueName, _partitions: u32) -> StorageResult<u64> {
        let name = queue.as_str().to_owned();
        self.in_transaction("delete_queue", move |tx, schema| {
            let name = name.clone();
            Box::pin(async move {
                tx.execute(
                    &format!("SELECT 1 FROM {schema}.partitions WHERE queue = $1 FOR UPDATE"),
                    &[&name],
                )
                .await?;
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT (SELECT count(*) FROM {schema}.tasks WHERE queue = $1) \
                             + (SELECT count(*) FROM {schema}.superseded WHERE queue = $1)"
                        ),
                        &[&name],
                    )
                    .await?;
                let removed = from_db(row.get(0));
                for table in [
                    "tasks",
                    "superseded",
                    "done",
                    "ticks",
                    "partitions",
                    "paused",
                    "rate_windows",
                    "global_slots",
                    "queues",
                ] {
                    tx.execute(
                        &format!("DELETE FROM {schema}.{table} WHERE queue = $1"),
                        &[&name],
                    )
                    .await?;
                }
                Ok(removed)
            })
        })
        .await
    }
}

impl PostgresStore {
    async fn register_partitions(&self, queue: &QueueName, partitions: u32) -> StorageResult<u32> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(StorageError::InvalidPartitionCount {
                queue: queue.to_string(),
                partitions,
            });
        }
        let name = queue.as_str().to_owned();
        let count = i32::try_from(partitions).unwrap_or(i32::MAX);
        let recorded: i32 = self
            .in_transaction("register_queue", move |tx, schema| {
                let name = name.clone();
                Box::pin(async move {
                    tx.execute(
                        &format!(
                            "INSERT INTO {schema}.queues (queue, partitions) VALUES ($1, $2) \
                             ON CONFLICT DO NOTHING"
                        ),
                        &[&name, &count],
                    )
                    .await?;
                    let row = tx
                        .query_one(
                            &format!("SELECT partitions FROM {schema}.queues WHERE queue = $1"),
                            &[&name],
                        )
                        .await?;
                    Ok(row.get(0))
                })
            })
            .await?;
        let recorded = u32::try_from(recorded).unwrap_or(0);
        if recorded != partitions {
            return Err(StorageError::PartitionMismatch {
                queue: queue.to_string(),
                configured: partitions,
                recorded,
            });
        }
        Ok(recorded)
    }

    async fn registered_queues(&self) -> StorageResult<Vec<(QueueName, u32)>> {
        let rows: Vec<(String, i32)> = self
            .in_transaction("queues", |tx, schema| {
                Box::pin(async move {
                    let rows = tx
                        .query(
                            &format!(
                                "SELECT queue, partitions FROM {schema}.queues ORDER BY queue"
                            ),
                            &[],
                        )
                        .await?;
                    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
                })
            })
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(name, partitions)| {
                Some((QueueName::new(name).ok()?, u32::try_from(partitions).ok()?))
            })
            .collect())
    }
}
