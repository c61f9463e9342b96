//! Claims: `claim_due` (several partitions per call on a single master, see
//! [`RedisStore::group_of`]) and `recover_claim`, which fetches again the tasks of a claim
//! whose reply was lost.

use redis::Value;

use crate::error::StorageResult;
use crate::model::{ClaimBatch, ClaimedTask, LeaseToken, Partition};
use crate::TraceParent;

use super::connection::{ClaimRequest, RedisStore};
use super::error_map::{copy_error, map_error, unexpected_reply};
use super::keys::PartitionKeys;
use super::lease::{decode, explicit_due};
use super::reply::{array, expect_array, expect_number, stored_traceparent, task_id, text};
use super::scripts::SCRIPTS;
use delayq_redis::ScriptCall;

impl RedisStore {
    pub(crate) async fn claim(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<ClaimBatch> {
        let request = ClaimRequest {
            partition: partition.clone(),
            now_ms,
            limit,
            lease_deadline_ms,
            owner: owner.to_owned(),
            flow: self.flow_limits.of(&partition.queue),
        };
        self.claims
            .submit_lazily(
                "claim_due",
                self.group_of(partition),
                request,
                limit.max(1),
                || {
                    let store = self.clone();
                    move |_, requests| {
                        let store = store.clone();
                        async move { store.claim_batch(requests).await }
                    }
                },
            )
            .await
    }

    /// Claims of one or more partitions in one script call; one result per request.
    async fn claim_batch(&self, requests: Vec<ClaimRequest>) -> Vec<StorageResult<ClaimBatch>> {
        const OPERATION: &str = "claim_due";
        let keys: Vec<PartitionKeys> = requests
            .iter()
            .map(|request| self.keys(&request.partition))
            .collect();
        let mut call = ScriptCall::new(&SCRIPTS.claim_due);
        for (request, keys) in requests.iter().zip(&keys) {
            call = call
                .key(&keys.due)
                .key(&keys.tasks)
                .key(&keys.inflight)
                .key(&keys.dead)
                .key(&keys.receipt)
                .key(&keys.paused)
                .key(&keys.traces)
                .key(&keys.flow)
                .key(&keys.parked)
                .key(&keys.fires)
                .key(&keys.fire_times)
                .arg(request.now_ms)
                .arg(request.limit)
                .arg(request.lease_deadline_ms)
                .arg(&request.owner)
                .arg(self.options.max_claim_bytes);
            let [slots, rate, period, fifo] = super::flow::claim_args(request.flow.as_ref());
            call = call.arg(slots).arg(rate).arg(period).arg(fifo);
        }
        let replies = match self.invoke(&call).await {
            Ok(reply) => array(reply).filter(|replies| replies.len() == requests.len()),
            Err(error) => {
                return keys
                    .iter()
                    .map(|keys| Err(map_error(OPERATION, &keys.tasks, copy_error(&error))))
                    .collect()
            }
        };
        let Some(replies) = replies else {
            return requests
                .iter()
                .map(|_| Err(unexpected_reply(OPERATION, "not one reply per partition")))
                .collect();
        };
        requests
            .iter()
            .zip(&keys)
            .zip(replies)
            .map(|((request, keys), reply)| claimed_batch(request, keys, reply))
            .collect()
    }

    pub(crate) async fn recover(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> StorageResult<ClaimBatch> {
        const OPERATION: &str = "recover_claim";
        let keys = self.keys(partition);
        // Reads only: retried like a read.
        let reply = self
            .read(OPERATION, &keys.tasks, |connection| {
                let call = ScriptCall::new(&SCRIPTS.recover_claim)
                    .key(&keys.tasks)
                    .key(&keys.inflight)
                    .key(&keys.receipt)
                    .key(&keys.traces)
                    .arg(owner)
                    .arg(lease_deadline_ms);
                async move { connection.run_script(&call).await }
            })
            .await?;
        let mut values = expect_array(OPERATION, reply)?.into_iter();
        let traces = trace_list(&keys.traces, values.next());
        let tasks = claimed_tasks(partition, &keys.tasks, values, traces);
        if !tasks.is_empty() {
            tracing::info!(%partition, owner, recovered = tasks.len(), "recovered the tasks of a claim whose reply was lost");
        }
        Ok(ClaimBatch {
            tasks,
            next_due_ms: None,
            dead_lettered: Vec::new(),
            paused: false,
            held_back: 0,
        })
    }
}

/// The traces of a claim reply: `false` (the partition holds none), else one traceparent or
/// nil per claimed task. One that does not parse is logged and dropped: the task runs without.
fn trace_list(traces_key: &str, value: Option<Value>) -> Vec<Option<TraceParent>> {
    let Some(Value::Array(values)) = value else {
        return Vec::new();
    };
    values
        .into_iter()
        .map(|value| stored_traceparent(traces_key, value))
        .collect()
}

/// The `(id, record)` pairs of a claim reply as tasks, with `traces` (aligned with them, or
/// empty). A pair that cannot be read is logged and left out, never failing the others: they
/// are in flight already, and the one left out comes back when its lease runs out.
fn claimed_tasks(
    partition: &Partition,
    tasks_key: &str,
    mut values: impl Iterator<Item = Value>,
    traces: Vec<Option<TraceParent>>,
) -> Vec<ClaimedTask> {
    let mut tasks = Vec::new();
    let mut traces = traces.into_iter();
    while let (Some(id), Some(raw)) = (values.next(), values.next()) {
        let traceparent = traces.next().flatten();
        let task = task_id(tasks_key, id).and_then(|id| {
            let record = decode(tasks_key, &id, raw)?;
            let due_ms = explicit_due(tasks_key, &id, &record)?;
            Ok(ClaimedTask {
                token: LeaseToken {
                    partition: partition.clone(),
                    id: id.clone(),
                    generation: record.generation,
                    claim: record.claim,
                },
                id,
                due_ms,
                attempt: record.attempt,
                generation: record.generation,
                payload: record.payload,
                traceparent,
            })
        });
        match task {
            Ok(task) => tasks.push(task),
            Err(error) => {
                tracing::error!(%partition, %error, "a claimed task could not be read; it comes back when its lease runs out")
            }
        }
    }
    tasks
}

/// One partition's reply of `claim_due.lua`: `{next due or false, count (-1: paused), traces,
/// held back, id, record, ..., then id, reason of each record moved to the dead letters}`.
fn claimed_batch(
    request: &ClaimRequest,
    keys: &PartitionKeys,
    reply: Value,
) -> StorageResult<ClaimBatch> {
    const OPERATION: &str = "claim_due";
    let partition = &request.partition;
    let mut values = expect_array(OPERATION, reply)?.into_iter();
    let next_due_ms = match values.next() {
        None | Some(Value::Nil) | Some(Value::Boolean(false)) => None,
        Some(value) => Some(expect_number(OPERATION, &value, "the next due time")?),
    };
    let claimed = match values.next() {
        Some(Value::Int(-1)) => {
            return Ok(ClaimBatch {
                paused: true,
                ..ClaimBatch::default()
            })
        }
        Some(count) => expect_number(OPERATION, &count, "the claimed count")?,
        None => return Err(unexpected_reply(OPERATION, "no claimed count")),
    };
    let traces = trace_list(&keys.traces, values.next());
    let held_back = match values.next() {
        Some(value) => expect_number(OPERATION, &value, "the held-back count")?,
        None => return Err(unexpected_reply(OPERATION, "no held-back count")),
    };
    let tasks = claimed_tasks(
        partition,
        &keys.tasks,
        values.by_ref().take(2 * claimed as usize),
        traces,
    );
    let mut dead_lettered = Vec::new();
    while let (Some(id), Some(reason)) = (values.next(), values.next()) {
        let reason = text(reason).unwrap_or_default();
        match task_id(&keys.due, id) {
            Ok(id) => {
                tracing::warn!(%partition, %id, reason, "a due record could not be decoded: moved to the dead letters");
                dead_lettered.push((id, reason));
            }
            Err(error) => {
                tracing::warn!(%partition, %error, "a poisoned record with an unreadable id was dead-lettered")
            }
        }
    }
    tracing::trace!(%partition, owner = %request.owner, claimed = tasks.len(), ?next_due_ms, "claimed");
    Ok(ClaimBatch {
        tasks,
        next_due_ms,
        dead_lettered,
        paused: false,
        held_back,
    })
}
