//! The life of a claimed task: `ack` (several partitions per call on a single master),
//! `fail`, `renew`, `requeue_expired`, `look`, and the read-only `peek_window` that feeds
//! prefetching. Claims are in `claim.rs`.

use delayq_redis::ScriptCall;
use redis::Value;

use crate::error::{StorageError, StorageResult};
use crate::model::{
    validate_due, AckOutcome, FailAction, FailOutcome, LeaseToken, LookReport, LookRequest,
    Partition, TaskId,
};

use super::batch::by_partition;
use super::connection::RedisStore;
use super::error_map::{copy_error, is_stale, map_error, unexpected_reply};
use super::keys::PartitionKeys;
use super::record::Record;
use super::reply::{
    array, bytes, expect_array, expect_number, number, scored_pairs, task_id, text,
};
use super::scripts::SCRIPTS;

/// The longest last-error text kept in a record; longer ones are cut at a char boundary.
pub(crate) const MAX_ERROR_BYTES: usize = 4096;

impl RedisStore {
    pub(crate) async fn peek(
        &self,
        partition: &Partition,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        const OPERATION: &str = "peek_window";
        if limit == 0 || from_ms > to_ms {
            return Ok(Vec::new());
        }
        let keys = self.keys(partition);
        let reply: Vec<Value> = self
            .read(OPERATION, &keys.tasks, |connection| {
                let mut command = redis::cmd("ZRANGEBYSCORE");
                command
                    .arg(&keys.due)
                    .arg(from_ms)
                    .arg(to_ms)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit);
                async move { connection.query(OPERATION, &command).await }
            })
            .await?;
        scored_pairs(reply)
            .into_iter()
            .map(|(id, score)| {
                let due_ms = expect_number(OPERATION, &score, "a due score")?;
                Ok((task_id(&keys.due, id)?, due_ms))
            })
            .collect()
    }

    /// Acks `token`, in one script call with the other acks of its partition in flight; with
    /// `wait_replicas`, then waits for the replicas (see `replication.rs`).
    pub(crate) async fn complete(&self, token: &LeaseToken) -> StorageResult<AckOutcome> {
        if let Some(settled) = self.confirm_ack(token, None).await {
            return settled;
        }
        let outcome = self
            .acks
            .submit_lazily(
                "ack",
                self.group_of(&token.partition),
                token.clone(),
                1,
                || {
                    let store = self.clone();
                    move |_, tokens| {
                        let store = store.clone();
                        async move { store.ack_batch(tokens).await }
                    }
                },
            )
            .await?;
        match self.confirm_ack(token, Some(outcome)).await {
            Some(settled) => settled,
            None => Ok(outcome),
        }
    }

    /// Acks tokens of one or more partitions in one script call; one result per token.
    async fn ack_batch(&self, tokens: Vec<LeaseToken>) -> Vec<StorageResult<AckOutcome>> {
        const OPERATION: &str = "ack";
        let groups = by_partition(tokens.iter().map(|token| &token.partition));
        let keys: Vec<PartitionKeys> = groups
            .iter()
            .map(|(partition, _)| self.keys(partition))
            .collect();
        let mut call = ScriptCall::new(&SCRIPTS.ack).arg(self.options.executed_retention_ms);
        for ((_, members), keys) in groups.iter().zip(&keys) {
            call = call
                .key(&keys.tasks)
                .key(&keys.inflight)
                .key(&keys.done)
                .key(&keys.traces)
                .key(&keys.due)
                .key(&keys.flow)
                .key(&keys.parked)
                .arg(members.len());
            for &index in members {
                let token = &tokens[index];
                call = call
                    .arg(token.id.as_str())
                    .arg(token.generation)
                    .arg(token.claim);
            }
        }
        let mut results: Vec<Option<StorageResult<AckOutcome>>> =
            tokens.iter().map(|_| None).collect();
        let verdicts = match self.invoke_on(&self.acker, &call).await {
            Ok(reply) => array(reply).filter(|verdicts| verdicts.len() == tokens.len()),
            Err(error) => {
                for ((_, members), keys) in groups.iter().zip(&keys) {
                    for &index in members {
                        results[index] =
                            Some(Err(map_error(OPERATION, &keys.tasks, copy_error(&error))));
                    }
                }
                None
            }
        };
        if let Some(verdicts) = verdicts {
            let mut verdicts = verdicts.into_iter();
            for ((_, members), keys) in groups.iter().zip(&keys) {
                for &index in members {
                    let verdict = verdicts.next().and_then(text).unwrap_or_default();
                    results[index] = Some(ack_verdict(&tokens[index], &keys.tasks, &verdict));
                }
            }
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(unexpected_reply(OPERATION, "not one verdict per token"))
                })
            })
            .collect()
    }

    pub(crate) async fn record_failure(
        &self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
    ) -> StorageResult<FailOutcome> {
        const OPERATION: &str = "fail";
        let (action_arg, retry_at) = match action {
            FailAction::RetryAt(due_ms) => ("retry", validate_due(due_ms)?),
            FailAction::RequeueAt(due_ms) => ("requeue", validate_due(due_ms)?),
            FailAction::DeadLetter => ("dead", 0),
        };
        let keys = self.keys(&token.partition);
        let call = ScriptCall::new(&SCRIPTS.fail)
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .key(&keys.dead)
            .key(&keys.flow)
            .key(&keys.parked)
            .arg(token.id.as_str())
            .arg(token.generation)
            .arg(token.claim)
            .arg(truncate(error, MAX_ERROR_BYTES))
            .arg(action_arg)
            .arg(retry_at);
        let reply = self
            .invoke(&call)
            .await
            .map_err(|error| token_error(OPERATION, &keys.tasks, token, error))?;
        let mut values = expect_array(OPERATION, reply)?.into_iter();
        let verdict = values.next().and_then(text).unwrap_or_default();
        match verdict.as_str() {
            "retrying" => {
                let attempt = values.next().as_ref().and_then(number);
                let due_ms = values.next().as_ref().and_then(number);
                match (attempt.and_then(|a| u32::try_from(a).ok()), due_ms) {
                    (Some(attempt), Some(due_ms)) => Ok(FailOutcome::Retrying { attempt, due_ms }),
                    _ => Err(unexpected_reply(
                        OPERATION,
                        "retrying without attempt or due",
                    )),
                }
            }
            "dead" => Ok(FailOutcome::DeadLettered),
            "superseded" => Ok(FailOutcome::Superseded),
            other => Err(unexpected_reply(OPERATION, format!("verdict {other:?}"))),
        }
    }

    pub(crate) async fn extend_lease(
        &self,
        token: &LeaseToken,
        lease_deadline_ms: u64,
    ) -> StorageResult<()> {
        let keys = self.keys(&token.partition);
        let call = ScriptCall::new(&SCRIPTS.renew)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .arg(token.id.as_str())
            .arg(token.generation)
            .arg(token.claim)
            .arg(lease_deadline_ms);
        self.invoke(&call)
            .await
            .map_err(|error| token_error("renew", &keys.tasks, token, error))?;
        Ok(())
    }

    pub(crate) async fn requeue(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<TaskId>> {
        const OPERATION: &str = "requeue_expired";
        if limit == 0 {
            return Ok(Vec::new());
        }
        let keys = self.keys(partition);
        let call = ScriptCall::new(&SCRIPTS.requeue_expired)
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .key(&keys.flow)
            .key(&keys.parked)
            .arg(now_ms)
            .arg(limit);
        let reply = self
            .invoke(&call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.tasks, error))?;
        let ids = expect_array(OPERATION, reply)?
            .into_iter()
            .map(|id| task_id(&keys.inflight, id))
            .collect::<StorageResult<Vec<_>>>()?;
        if !ids.is_empty() {
            tracing::info!(%partition, requeued = ids.len(), "leases ran out; tasks are pending again");
        }
        Ok(ids)
    }

    /// `look.lua`: the lease sweep, the pruning and the prefetch read of one partition.
    pub(crate) async fn look_at(
        &self,
        partition: &Partition,
        request: &LookRequest,
    ) -> StorageResult<LookReport> {
        const OPERATION: &str = "look";
        let keys = self.keys(partition);
        let call = ScriptCall::new(&SCRIPTS.look)
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .key(&keys.done)
            .key(&keys.flow)
            .key(&keys.parked)
            .arg(request.now_ms)
            .arg(request.window_end_ms)
            .arg(request.window_limit.max(1))
            .arg(request.requeue_limit)
            .arg(request.prune_before_ms.unwrap_or(0))
            .arg(request.prune_limit);
        let reply = self
            .invoke(&call)
            .await
            .map_err(|error| map_error(OPERATION, &keys.tasks, error))?;
        let mut parts = expect_array(OPERATION, reply)?.into_iter();
        let mut next = |what: &str| {
            parts
                .next()
                .ok_or_else(|| unexpected_reply(OPERATION, format!("no {what}")))
        };
        let requeued = expect_array(OPERATION, next("requeued ids")?)?
            .into_iter()
            .map(|id| task_id(&keys.inflight, id))
            .collect::<StorageResult<Vec<_>>>()?;
        let pruned = expect_number(OPERATION, &next("pruned count")?, "a pruned count")?;
        let window = scored_pairs(expect_array(OPERATION, next("window")?)?)
            .into_iter()
            .map(|(id, score)| {
                let due_ms = expect_number(OPERATION, &score, "a due score")?;
                Ok((task_id(&keys.due, id)?, due_ms))
            })
            .collect::<StorageResult<Vec<_>>>()?;
        let optional_number = |value: Value, what: &str| match value {
            Value::Nil | Value::Boolean(false) => Ok(None),
            value => expect_number(OPERATION, &value, what).map(Some),
        };
        let next_due_after_window_ms = optional_number(next("next due")?, "a due score")?;
        let earliest_lease_deadline_ms =
            optional_number(next("earliest lease")?, "a lease deadline")?;
        if !requeued.is_empty() {
            tracing::info!(%partition, requeued = requeued.len(), "leases ran out; tasks are pending again");
        }
        Ok(LookReport {
            requeued,
            pruned,
            window,
            next_due_after_window_ms,
            earliest_lease_deadline_ms,
        })
    }
}

/// Decodes a record read from `tasks_key` field `id`.
pub(crate) fn decode(tasks_key: &str, id: &TaskId, raw: Value) -> StorageResult<Record> {
    let raw = bytes(raw).ok_or_else(|| StorageError::CorruptRecord {
        key: tasks_key.to_owned(),
        field: id.to_string(),
        reason: "the record is missing".to_owned(),
    })?;
    Record::decode(raw).map_err(|reason| StorageError::CorruptRecord {
        key: tasks_key.to_owned(),
        field: id.to_string(),
        reason,
    })
}

/// The due a record outside the `due` set must carry.
pub(crate) fn explicit_due(tasks_key: &str, id: &TaskId, record: &Record) -> StorageResult<u64> {
    record
        .explicit_due()
        .map_err(|reason| StorageError::CorruptRecord {
            key: tasks_key.to_owned(),
            field: id.to_string(),
            reason,
        })
}

/// Maps the error of a script that checks a lease token.
fn token_error(
    operation: &'static str,
    tasks_key: &str,
    token: &LeaseToken,
    error: delayq_redis::Error,
) -> StorageError {
    if is_stale(&error) {
        StorageError::StaleLease {
            partition: token.partition.to_string(),
            id: token.id.to_string(),
        }
    } else {
        map_error(operation, tasks_key, error)
    }
}

/// `text` cut to at most `max` bytes at a char boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One verdict of `ack.lua` for `token`.
fn ack_verdict(token: &LeaseToken, tasks_key: &str, verdict: &str) -> StorageResult<AckOutcome> {
    match verdict.split_at(verdict.len().min(1)) {
        ("C", _) => Ok(AckOutcome::Completed),
        ("S", _) => Ok(AckOutcome::Superseded),
        ("L", _) => Err(StorageError::StaleLease {
            partition: token.partition.to_string(),
            id: token.id.to_string(),
        }),
        ("X", reason) => Err(StorageError::CorruptRecord {
            key: tasks_key.to_owned(),
            field: token.id.to_string(),
            reason: reason.to_owned(),
        }),
        _ => Err(unexpected_reply("ack", format!("verdict {verdict:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn long_errors_are_cut_at_a_char_boundary() {
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("ééé", 3), "é");
    }
}
