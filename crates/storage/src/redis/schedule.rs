//! `schedule` and `schedule_many`: one script, `lua/schedule.lua`, that takes any number of
//! items of one partition.
//!
//! `schedule_many` validates every item first (an invalid one fails alone, before anything is
//! sent), then cuts the rest into pipelines of at most [`PIPELINE_ITEMS`] items (and about
//! [`PIPELINE_BYTES`] of payload). In each pipeline the items are grouped by partition and each
//! group is one EVALSHA, so a script call amortises its overhead over many items. A few
//! pipelines are in flight at once on the multiplexed connection. NOSCRIPT replies (Redis
//! restarted or flushed its script cache) make us load the script and resend just those
//! calls, which did not run. When a pipeline fails on the connection, its items carry the
//! error (their fate is unknown) and the pipelines not yet sent carry it too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::{self, StreamExt};
use redis::{Cmd, RedisError, Value};

use crate::error::{StorageError, StorageResult};
use crate::model::{validate_due, NewTask, Partition, ScheduleMode, ScheduleOutcome, TaskId};
use crate::store::ItemResult;

use super::connection::{within, RedisStore};
use super::error_map::{is_noscript, map_error, unexpected_reply};
use super::keys::PartitionKeys;
use super::reply::{array, text};
use super::scripts::SCRIPTS;

/// The most items in one pipeline.
pub(crate) const PIPELINE_ITEMS: usize = 1_000;
/// Roughly the most payload bytes in one pipeline (a single larger item goes alone).
pub(crate) const PIPELINE_BYTES: usize = 8 * 1024 * 1024;
/// Pipelines in flight at once: enough to overlap our encoding with Redis's work.
const PIPELINES_IN_FLIGHT: usize = 4;

const OPERATION: &str = "schedule_many";

impl RedisStore {
    /// Checks one item before anything is sent.
    pub(crate) fn validate(&self, task: &NewTask) -> StorageResult<()> {
        validate_due(task.due_ms)?;
        let max = self.options.max_payload;
        if task.payload.len() > max {
            return Err(StorageError::PayloadTooLarge {
                id: task.id.to_string(),
                size: task.payload.len(),
                max,
            });
        }
        Ok(())
    }

    pub(crate) async fn schedule_one(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.validate(&task)?;
        let store = self.clone();
        self.schedules
            .submit(
                "schedule",
                (partition.clone(), mode == ScheduleMode::IfAbsent),
                task,
                move |(partition, if_absent), tasks| {
                    let store = store.clone();
                    let mode = if if_absent {
                        ScheduleMode::IfAbsent
                    } else {
                        ScheduleMode::Upsert
                    };
                    async move { store.schedule_call(&partition, mode, tasks).await }
                },
            )
            .await
    }

    /// Schedules validated tasks of one partition in one script call; one result per task.
    async fn schedule_call(
        &self,
        partition: &Partition,
        mode: ScheduleMode,
        tasks: Vec<NewTask>,
    ) -> Vec<ItemResult> {
        const OPERATION: &str = "schedule";
        let keys = self.keys(partition);
        let mut invocation = SCRIPTS.schedule.prepare_invoke();
        invocation
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .key(&keys.done)
            .key(&keys.dead)
            .arg(mode_arg(mode))
            .arg(self.options.executed_retention_ms);
        for task in &tasks {
            invocation
                .arg(task.id.as_str())
                .arg(task.due_ms)
                .arg(task.payload.as_ref());
        }
        let outcomes = match self.invoke_for_producer(&invocation).await {
            Ok(reply) => parse_outcomes(
                OPERATION,
                &keys.tasks,
                reply,
                tasks.iter().map(|task| &task.id),
            ),
            Err(error) => {
                return tasks
                    .iter()
                    .map(|_| Err(map_error(OPERATION, &keys.tasks, error.clone())))
                    .collect()
            }
        };
        outcomes.unwrap_or_else(|_| {
            tasks
                .iter()
                .map(|_| Err(unexpected_reply(OPERATION, "not one verdict per task")))
                .collect()
        })
    }

    pub(crate) async fn schedule_batch(
        &self,
        items: Vec<(Partition, NewTask)>,
        mode: ScheduleMode,
    ) -> StorageResult<Vec<ItemResult>> {
        let mut results: Vec<Option<ItemResult>> = Vec::with_capacity(items.len());
        let mut valid = Vec::with_capacity(items.len());
        for (index, (_, task)) in items.iter().enumerate() {
            match self.validate(task) {
                Ok(()) => {
                    valid.push(index);
                    results.push(None);
                }
                Err(error) => results.push(Some(Err(error))),
            }
        }

        let connection_failed = AtomicBool::new(false);
        let items = &items;
        let connection_failed = &connection_failed;
        let mut sent = stream::iter(pipelines(items, &valid))
            .map(|pipeline| async move {
                if connection_failed.load(Ordering::Relaxed) {
                    let outcomes = pipeline
                        .iter()
                        .map(|&index| (index, Err(not_sent())))
                        .collect();
                    return outcomes;
                }
                let outcomes = self.send_pipeline(items, &pipeline, mode).await;
                if outcomes
                    .iter()
                    .any(|(_, outcome)| matches!(outcome, Err(error) if error.is_transient()))
                {
                    connection_failed.store(true, Ordering::Relaxed);
                }
                outcomes
            })
            .buffered(PIPELINES_IN_FLIGHT);
        while let Some(outcomes) = sent.next().await {
            for (index, outcome) in outcomes {
                results[index] = Some(outcome);
            }
        }
        Ok(results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| Err(unexpected_reply(OPERATION, "an item got no outcome")))
            })
            .collect())
    }

    /// Sends one pipeline: one EVALSHA per partition group. Returns an outcome per item.
    async fn send_pipeline(
        &self,
        items: &[(Partition, NewTask)],
        pipeline: &[usize],
        mode: ScheduleMode,
    ) -> Vec<(usize, ItemResult)> {
        let mut group_of: HashMap<&Partition, usize> = HashMap::new();
        let mut groups: Vec<(PartitionKeys, Vec<usize>)> = Vec::new();
        for &index in pipeline {
            let partition = &items[index].0;
            let group = *group_of.entry(partition).or_insert_with(|| {
                groups.push((self.keys(partition), Vec::new()));
                groups.len() - 1
            });
            groups[group].1.push(index);
        }

        let mut outcomes = Vec::with_capacity(pipeline.len());
        let mut to_send: Vec<usize> = (0..groups.len()).collect();
        let mut reloaded = false;
        while !to_send.is_empty() {
            let mut commands = redis::pipe();
            commands.ignore_errors();
            for &group in &to_send {
                let (keys, members) = &groups[group];
                commands.add_command(schedule_command(keys, items, members, mode, self));
            }
            let mut connection = self.producer.clone();
            let replies: Vec<Value> =
                match within(self.deadline, commands.query_async(&mut connection)).await {
                    Ok(replies) => replies,
                    Err(error) => {
                        fail_groups(&mut outcomes, &groups, &to_send, &error);
                        return outcomes;
                    }
                };
            if replies.len() != to_send.len() {
                let error =
                    RedisError::from((redis::ErrorKind::Client, "pipeline reply count mismatch"));
                fail_groups(&mut outcomes, &groups, &to_send, &error);
                return outcomes;
            }
            let mut again = Vec::new();
            for (&group, reply) in to_send.iter().zip(replies) {
                let (keys, members) = &groups[group];
                match reply {
                    Value::ServerError(error) if is_noscript(error.code()) && !reloaded => {
                        again.push(group);
                    }
                    Value::ServerError(error) => {
                        let error = RedisError::from(error);
                        fail_groups(&mut outcomes, &groups, &[group], &error);
                    }
                    reply => {
                        let ids = members.iter().map(|&index| &items[index].1.id);
                        match parse_outcomes(OPERATION, &keys.tasks, reply, ids) {
                            Ok(results) => outcomes.extend(members.iter().copied().zip(results)),
                            Err(_) => {
                                for &index in members {
                                    outcomes.push((
                                        index,
                                        Err(unexpected_reply(
                                            OPERATION,
                                            "malformed schedule reply",
                                        )),
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            if !again.is_empty() {
                tracing::info!(
                    groups = again.len(),
                    "Redis lost its scripts (restart or SCRIPT FLUSH); loading them again"
                );
                reloaded = true;
                let mut connection = self.producer.clone();
                if let Err(error) =
                    within(self.deadline, SCRIPTS.schedule.load_async(&mut connection)).await
                {
                    fail_groups(&mut outcomes, &groups, &again, &error);
                    again.clear();
                }
            }
            to_send = again;
        }
        outcomes
    }
}

/// `EVALSHA <schedule> 5 <keys> <mode> <retention> (<id> <due> <payload>)...`
fn schedule_command(
    keys: &PartitionKeys,
    items: &[(Partition, NewTask)],
    members: &[usize],
    mode: ScheduleMode,
    store: &RedisStore,
) -> Cmd {
    let mut command = redis::cmd("EVALSHA");
    command
        .arg(SCRIPTS.schedule.get_hash())
        .arg(5)
        .arg(&keys.due)
        .arg(&keys.tasks)
        .arg(&keys.inflight)
        .arg(&keys.done)
        .arg(&keys.dead)
        .arg(mode_arg(mode))
        .arg(store.options.executed_retention_ms);
    for &index in members {
        let task = &items[index].1;
        command
            .arg(task.id.as_str())
            .arg(task.due_ms)
            .arg(task.payload.as_ref());
    }
    command
}

/// Every item of `groups` gets its own copy of `error`.
fn fail_groups(
    outcomes: &mut Vec<(usize, ItemResult)>,
    groups: &[(PartitionKeys, Vec<usize>)],
    which: &[usize],
    error: &RedisError,
) {
    for &group in which {
        let (keys, members) = &groups[group];
        for &index in members {
            outcomes.push((index, Err(map_error(OPERATION, &keys.tasks, error.clone()))));
        }
    }
}

fn not_sent() -> StorageError {
    StorageError::ConnectionLost {
        operation: OPERATION,
        message: "not sent: the connection failed earlier in this call".to_owned(),
    }
}

/// Cuts the valid items into pipelines by count and payload size, keeping their order.
fn pipelines(items: &[(Partition, NewTask)], valid: &[usize]) -> Vec<Vec<usize>> {
    let mut pipelines = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for &index in valid {
        let size = items[index].1.payload.len() + items[index].1.id.as_str().len();
        if !current.is_empty() && (current.len() == PIPELINE_ITEMS || bytes + size > PIPELINE_BYTES)
        {
            pipelines.push(std::mem::take(&mut current));
            bytes = 0;
        }
        current.push(index);
        bytes += size;
    }
    if !current.is_empty() {
        pipelines.push(current);
    }
    pipelines
}

fn mode_arg(mode: ScheduleMode) -> &'static str {
    match mode {
        ScheduleMode::Upsert => "upsert",
        ScheduleMode::IfAbsent => "if_absent",
    }
}

/// Reads the script's verdicts, one per id: `C`, `R<previous due>`, `K<due>`, `D`,
/// `X<reason>`.
fn parse_outcomes<'a>(
    operation: &'static str,
    tasks_key: &str,
    reply: Value,
    ids: impl IntoIterator<Item = &'a TaskId>,
) -> StorageResult<Vec<ItemResult>> {
    let values = array(reply).ok_or_else(|| unexpected_reply(operation, "expected an array"))?;
    let mut values = values.into_iter();
    let mut results = Vec::new();
    for id in ids {
        let verdict = values
            .next()
            .and_then(text)
            .ok_or_else(|| unexpected_reply(operation, "fewer verdicts than items"))?;
        let (code, detail) = verdict.split_at(verdict.chars().next().map_or(0, char::len_utf8));
        let due = || detail.parse::<u64>().ok();
        let result = match (code, due()) {
            ("C", _) => Ok(ScheduleOutcome::Created),
            ("D", _) => Ok(ScheduleOutcome::Duplicate),
            ("R", Some(previous_due_ms)) => Ok(ScheduleOutcome::Replaced { previous_due_ms }),
            ("K", Some(due_ms)) => Ok(ScheduleOutcome::Kept { due_ms }),
            ("X", _) => Err(StorageError::CorruptRecord {
                key: tasks_key.to_owned(),
                field: id.to_string(),
                reason: detail.to_owned(),
            }),
            _ => Err(unexpected_reply(operation, format!("verdict {verdict:?}"))),
        };
        results.push(result);
    }
    Ok(results)
}
