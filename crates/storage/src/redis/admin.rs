//! Looking tasks up, counting, and the housekeeping operations
//! (`cancel`, `prune_done`, dead letters).

use delayq_redis::ScriptCall;
use redis::Value;

use crate::error::StorageResult;
use crate::model::{Cancel, DeadTask, Partition, PartitionStats, TaskId, TaskInfo, TaskState};

use super::connection::RedisStore;
use super::error_map::{map_error, unexpected_reply};
use super::lease::{decode, explicit_due};
use super::replication::Writer;
use super::reply::{
    expect_array, expect_number, number, scored_pairs, stored_traceparent, task_id, text,
};
use super::scripts::SCRIPTS;

/// Entries removed per script call by the bulk housekeeping operations, so no single call
/// holds Redis for long.
const HOUSEKEEPING_CHUNK: usize = 1_000;

impl RedisStore {
    /// Cancels on the producers' connection (a producer's write); with `wait_replicas`,
    /// returns once the replicas confirmed it.
    pub(crate) async fn remove(&self, partition: &Partition, id: &TaskId) -> StorageResult<Cancel> {
        let keys = self.keys(partition);
        let call = ScriptCall::new(&SCRIPTS.cancel)
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .key(&keys.dead)
            .key(&keys.traces)
            .key(&keys.flow)
            .key(&keys.parked)
            .arg(id.as_str());
        let reply = self
            .invoke_on(&self.producer, &call)
            .await
            .map_err(|error| map_error("cancel", &keys.tasks, error))?;
        let outcome = match number(&reply) {
            Some(1) => Cancel::Cancelled,
            Some(2) => Cancel::InFlight,
            Some(0) => Cancel::NotFound,
            _ => return Err(unexpected_reply("cancel", format!("{reply:?}"))),
        };
        self.confirm(Writer::Producer, partition, "cancel").await?;
        Ok(outcome)
    }

    pub(crate) async fn lookup(
        &self,
        partition: &Partition,
        id: &TaskId,
    ) -> StorageResult<Option<TaskInfo>> {
        const OPERATION: &str = "get";
        let keys = self.keys(partition);
        let reply = self
            .read(OPERATION, &keys.tasks, |connection| {
                let call = ScriptCall::new(&SCRIPTS.get)
                    .key(&keys.due)
                    .key(&keys.tasks)
                    .key(&keys.inflight)
                    .key(&keys.dead)
                    .key(&keys.done)
                    .key(&keys.traces)
                    .key(&keys.flow)
                    .arg(id.as_str())
                    .arg(self.options.executed_retention_ms);
                async move { connection.run_script(&call).await }
            })
            .await?;
        let mut values = expect_array(OPERATION, reply)?;
        if values.is_empty() {
            return Ok(None);
        }
        // The trace is the fourth value; a reply of three (a nil trace at the end of the
        // script's table) has none.
        let trace = if values.len() == 4 {
            values.pop()
        } else {
            None
        };
        let [raw, state, score]: [Value; 3] = values
            .try_into()
            .map_err(|_| unexpected_reply(OPERATION, "expected three or four values"))?;
        let traceparent = trace.and_then(|value| stored_traceparent(&keys.traces, value));
        let record = decode(&keys.tasks, id, raw)?;
        let score = expect_number(OPERATION, &score, "the state's score")?;
        let state = match text(state).as_deref() {
            Some("pending") => TaskState::Pending,
            Some("inflight") => TaskState::Inflight,
            Some("dead") => TaskState::Dead,
            Some("done") => TaskState::Done,
            other => return Err(unexpected_reply(OPERATION, format!("state {other:?}"))),
        };
        let (due_ms, state_since_ms) = match state {
            TaskState::Pending => (score, None),
            _ => (explicit_due(&keys.tasks, id, &record)?, Some(score)),
        };
        Ok(Some(TaskInfo {
            id: id.clone(),
            state,
            due_ms,
            attempt: record.attempt,
            generation: record.generation,
            last_error: record.last_error(),
            payload: record.payload,
            state_since_ms,
            traceparent,
        }))
    }

    pub(crate) async fn count(
        &self,
        partition: &Partition,
        now_ms: u64,
    ) -> StorageResult<PartitionStats> {
        let keys = self.keys(partition);
        let counts: Vec<u64> = self
            .read("stats", &keys.tasks, |connection| {
                // One partition's keys share one slot: one pipeline to its master.
                let mut pipe = redis::pipe();
                pipe.zcard(&keys.due)
                    .zcount(&keys.due, "-inf", now_ms)
                    .zcard(&keys.inflight)
                    .zcard(&keys.dead)
                    .zcard(&keys.done)
                    .zcard(&keys.parked);
                async move { connection.query_pipeline("stats", &pipe).await }
            })
            .await?;
        match counts[..] {
            // Parked tasks are pending and due (parked only once due), outside `due`.
            [pending, due_now, inflight, dead, done, held_back] => Ok(PartitionStats {
                pending: pending + held_back,
                due_now: due_now + held_back,
                inflight,
                dead,
                done,
                held_back,
            }),
            _ => Err(unexpected_reply("stats", "expected six counts")),
        }
    }

    pub(crate) async fn prune(
        &self,
        partition: &Partition,
        older_than_ms: u64,
        limit: usize,
    ) -> StorageResult<u64> {
        let keys = self.keys(partition);
        let mut pruned = 0u64;
        let mut left = limit;
        while left > 0 {
            let chunk = left.min(HOUSEKEEPING_CHUNK);
            let call = ScriptCall::new(&SCRIPTS.prune_done)
                .key(&keys.tasks)
                .key(&keys.done)
                .arg(older_than_ms)
                .arg(chunk);
            let reply = self
                .invoke(&call)
                .await
                .map_err(|error| map_error("prune_done", &keys.tasks, error))?;
            let removed = expect_number("prune_done", &reply, "the pruned count")?;
            pruned += removed;
            left -= chunk;
            if removed < chunk as u64 {
                break;
            }
        }
        Ok(pruned)
    }

    pub(crate) async fn dead_letters(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<DeadTask>> {
        const OPERATION: &str = "list_dead";
        if limit == 0 {
            return Ok(Vec::new());
        }
        let keys = self.keys(partition);
        let reply = self
            .read(OPERATION, &keys.tasks, |connection| {
                let call = ScriptCall::new(&SCRIPTS.list_dead)
                    .key(&keys.tasks)
                    .key(&keys.dead)
                    .arg(limit);
                async move { connection.run_script(&call).await }
            })
            .await?;
        let mut values = expect_array(OPERATION, reply)?.into_iter();
        let mut dead = Vec::new();
        while let (Some(id), Some(failed_ms), Some(raw)) =
            (values.next(), values.next(), values.next())
        {
            let id = task_id(&keys.dead, id)?;
            let failed_ms = expect_number(OPERATION, &failed_ms, "failed_ms")?;
            let record = decode(&keys.tasks, &id, raw)?;
            dead.push(DeadTask {
                due_ms: explicit_due(&keys.tasks, &id, &record)?,
                id,
                attempt: record.attempt,
                failed_ms,
                last_error: record.last_error(),
                payload: record.payload,
            });
        }
        Ok(dead)
    }

    /// `ZRANGE dead 0 limit-1 WITHSCORES`: ids and failure times, no records.
    pub(crate) async fn dead_ids(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        const OPERATION: &str = "peek_dead";
        if limit == 0 {
            return Ok(Vec::new());
        }
        let keys = self.keys(partition);
        let reply: Vec<Value> = self
            .read(OPERATION, &keys.tasks, |connection| {
                let mut command = redis::cmd("ZRANGE");
                command
                    .arg(&keys.dead)
                    .arg(0)
                    .arg(limit - 1)
                    .arg("WITHSCORES");
                async move { connection.query(OPERATION, &command).await }
            })
            .await?;
        scored_pairs(reply)
            .into_iter()
            .map(|(id, score)| {
                let failed_ms = expect_number(OPERATION, &score, "failed_ms")?;
                Ok((task_id(&keys.dead, id)?, failed_ms))
            })
            .collect()
    }

    pub(crate) async fn revive(
        &self,
        partition: &Partition,
        id: &TaskId,
        due_ms: u64,
    ) -> StorageResult<bool> {
        crate::model::validate_due(due_ms)?;
        let keys = self.keys(partition);
        let call = ScriptCall::new(&SCRIPTS.retry_dead)
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.dead)
            .arg(id.as_str())
            .arg(due_ms);
        let reply = self
            .invoke(&call)
            .await
            .map_err(|error| map_error("retry_dead", &keys.tasks, error))?;
        Ok(number(&reply) == Some(1))
    }

    pub(crate) async fn purge(
        &self,
        partition: &Partition,
        id: Option<&TaskId>,
    ) -> StorageResult<u64> {
        const OPERATION: &str = "purge_dead";
        let keys = self.keys(partition);
        let mut purged = 0;
        loop {
            let call = ScriptCall::new(&SCRIPTS.purge_dead)
                .key(&keys.tasks)
                .key(&keys.dead)
                .key(&keys.traces);
            let call = match id {
                Some(id) => call.arg("one").arg(id.as_str()),
                None => call.arg("chunk").arg(HOUSEKEEPING_CHUNK),
            };
            let reply = self
                .invoke(&call)
                .await
                .map_err(|error| map_error(OPERATION, &keys.tasks, error))?;
            let removed = expect_number(OPERATION, &reply, "the purged count")?;
            purged += removed;
            if id.is_some() || removed < HOUSEKEEPING_CHUNK as u64 {
                return Ok(purged);
            }
        }
    }
}
