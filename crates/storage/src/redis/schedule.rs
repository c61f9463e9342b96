//! `schedule` and `schedule_many`: one script, `lua/schedule.lua`, that takes any number of
//! items of one partition, on the producers' connection. Single schedules waiting at once are
//! coalesced into one call per (partition, mode), of at most [`PIPELINE_BYTES`] of payload
//! too (the batcher cuts them by [`item_bytes`], like the rounds here).
//!
//! `schedule_many` validates every item first (an invalid one fails alone, before anything is
//! sent), then cuts the rest into rounds of at most [`PIPELINE_ITEMS`] items (and about
//! [`PIPELINE_BYTES`] of payload). In each round the items are grouped by partition and each
//! group is one script call, so a call amortises its overhead over many items; the connection
//! layer sends the calls of one slot in one pipeline to its master, and the slots in parallel
//! (`run_scripts`), reloading a script a master lost (`NOSCRIPT`) and resending just those
//! calls. A few rounds are in flight at once. When a round fails on the connection, its items
//! carry the error (their fate is unknown) and the rounds not yet sent carry it too. With
//! `wait_replicas`, each round's items are reported once the replicas of their masters
//! confirmed them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use delayq_redis::ScriptCall;
use futures::future::join_all;
use futures::stream::{self, StreamExt};
use redis::Value;

use crate::error::{StorageError, StorageResult};
use crate::model::{validate_due, NewTask, Partition, ScheduleMode, ScheduleOutcome, TaskId};
use crate::store::ItemResult;

use super::batch::round_len;
use super::connection::{within, RedisStore};
use super::error_map::{copy_error, map_error, unexpected_reply};
use super::keys::PartitionKeys;
use super::replication::Writer;
use super::reply::{array, text};
use super::scripts::SCRIPTS;

/// The most items in one round.
pub(crate) const PIPELINE_ITEMS: usize = 1_000;
/// Roughly the most payload bytes in one round (a single larger item goes alone).
pub(crate) const PIPELINE_BYTES: usize = 8 * 1024 * 1024;
/// Rounds in flight at once: enough to overlap our encoding with Redis's work.
const PIPELINES_IN_FLIGHT: usize = 4;

const OPERATION: &str = "schedule_many";

impl RedisStore {
    /// Checks one item before anything is sent: the payload first, then the due, in the
    /// memory backend's order (a task wrong in both reports `PayloadTooLarge` on both).
    pub(crate) fn validate(&self, task: &NewTask) -> StorageResult<()> {
        let max = self.options.max_payload;
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
                (partition.clone(), mode),
                task,
                move |(partition, mode), tasks| {
                    let store = store.clone();
                    async move { store.schedule_call(&partition, mode, tasks).await }
                },
            )
            .await
    }

    /// Schedules validated tasks of one partition in one script call; one result per task.
    /// With `wait_replicas`, the stored ones are reported once the replicas confirmed them.
    async fn schedule_call(
        &self,
        partition: &Partition,
        mode: ScheduleMode,
        tasks: Vec<NewTask>,
    ) -> Vec<ItemResult> {
        const OPERATION: &str = "schedule";
        let keys = self.keys(partition);
        let members: Vec<&NewTask> = tasks.iter().collect();
        let call = schedule_call(&keys, &members, mode, self.options.executed_retention_ms);
        let outcomes = match self.invoke_on(&self.producer, &call).await {
            Ok(reply) => parse_outcomes(
                OPERATION,
                &keys.tasks,
                reply,
                tasks.iter().map(|task| &task.id),
            ),
            Err(error) => {
                return tasks
                    .iter()
                    .map(|_| Err(map_error(OPERATION, &keys.tasks, copy_error(&error))))
                    .collect()
            }
        };
        let outcomes = outcomes.unwrap_or_else(|_| {
            tasks
                .iter()
                .map(|_| Err(unexpected_reply(OPERATION, "not one verdict per task")))
                .collect()
        });
        match self.confirm(Writer::Producer, partition, OPERATION).await {
            Ok(()) => outcomes,
            Err(error) => unconfirmed(outcomes, &error),
        }
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
        let mut sent = stream::iter(rounds(items, &valid))
            .map(|pipeline| async move {
                if connection_failed.load(Ordering::Relaxed) {
                    let outcomes = pipeline
                        .iter()
                        .map(|&index| (index, Err(not_sent())))
                        .collect();
                    return outcomes;
                }
                let outcomes = self.send_round(items, &pipeline, mode).await;
                let lost = |error: &StorageError| {
                    matches!(
                        error,
                        StorageError::ConnectionLost { .. } | StorageError::Timeout { .. }
                    )
                };
                if outcomes
                    .iter()
                    .any(|(_, outcome)| matches!(outcome, Err(error) if lost(error)))
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

    /// Sends one round: one script call per partition group, grouped by slot by the
    /// connection layer. Returns an outcome per item.
    async fn send_round(
        &self,
        items: &[(Partition, NewTask)],
        pipeline: &[usize],
        mode: ScheduleMode,
    ) -> Vec<(usize, ItemResult)> {
        let mut group_of: HashMap<&Partition, usize> = HashMap::new();
        let mut groups: Vec<(&Partition, PartitionKeys, Vec<usize>)> = Vec::new();
        for &index in pipeline {
            let partition = &items[index].0;
            let group = *group_of.entry(partition).or_insert_with(|| {
                groups.push((partition, self.keys(partition), Vec::new()));
                groups.len() - 1
            });
            groups[group].2.push(index);
        }
        let retention = self.options.executed_retention_ms;
        let calls: Vec<ScriptCall<'_>> = groups
            .iter()
            .map(|(_, keys, members)| {
                let tasks: Vec<&NewTask> = members.iter().map(|&index| &items[index].1).collect();
                schedule_call(keys, &tasks, mode, retention)
            })
            .collect();
        let replies = match within(self.deadline, async {
            Ok(self.producer.run_scripts(&calls).await)
        })
        .await
        {
            Ok(replies) if replies.len() == calls.len() => replies,
            Ok(_) => {
                let mismatch = || unexpected_reply(OPERATION, "not one reply per script call");
                return groups
                    .iter()
                    .flat_map(|(_, _, members)| {
                        members.iter().map(move |&index| (index, Err(mismatch())))
                    })
                    .collect();
            }
            Err(error) => {
                return groups
                    .iter()
                    .flat_map(|(_, keys, members)| {
                        let error = &error;
                        members.iter().map(move |&index| {
                            (
                                index,
                                Err(map_error(OPERATION, &keys.tasks, copy_error(error))),
                            )
                        })
                    })
                    .collect();
            }
        };

        let mut per_group: Vec<Vec<ItemResult>> = Vec::with_capacity(groups.len());
        for ((_, keys, members), reply) in groups.iter().zip(replies) {
            let results = match reply {
                Ok(reply) => {
                    let ids = members.iter().map(|&index| &items[index].1.id);
                    parse_outcomes(OPERATION, &keys.tasks, reply, ids).unwrap_or_else(|_| {
                        members
                            .iter()
                            .map(|_| Err(unexpected_reply(OPERATION, "malformed schedule reply")))
                            .collect()
                    })
                }
                Err(error) => members
                    .iter()
                    .map(|_| Err(map_error(OPERATION, &keys.tasks, copy_error(&error))))
                    .collect(),
            };
            per_group.push(results);
        }

        // With wait_replicas: one WAIT per master (per slot on a cluster) that took writes.
        let confirmations = join_all(groups.iter().zip(&per_group).map(
            |((partition, _, _), results)| async move {
                if results.iter().any(Result::is_ok) {
                    self.confirm(Writer::Producer, partition, OPERATION).await
                } else {
                    Ok(())
                }
            },
        ))
        .await;
        let mut outcomes = Vec::with_capacity(pipeline.len());
        for (((_, _, members), results), confirmation) in
            groups.iter().zip(per_group).zip(confirmations)
        {
            let results = match confirmation {
                Ok(()) => results,
                Err(error) => unconfirmed(results, &error),
            };
            outcomes.extend(members.iter().copied().zip(results));
        }
        outcomes
    }
}

/// `schedule.lua` on `keys` with `mode`, retention, then `(<id> <due> <payload>)...`.
fn schedule_call<'a>(
    keys: &PartitionKeys,
    tasks: &[&NewTask],
    mode: ScheduleMode,
    retention_ms: u64,
) -> ScriptCall<'a> {
    let mut call = ScriptCall::new(&SCRIPTS.schedule)
        .key(&keys.due)
        .key(&keys.tasks)
        .key(&keys.inflight)
        .key(&keys.done)
        .key(&keys.dead)
        .arg(mode_arg(mode))
        .arg(retention_ms);
    for task in tasks {
        call = call
            .arg(task.id.as_str())
            .arg(task.due_ms)
            .arg(task.payload.as_ref());
    }
    call
}

/// The stored items of `results` fail with a copy of `error` (too few replicas confirmed
/// them); the others keep their own error.
fn unconfirmed(results: Vec<ItemResult>, error: &StorageError) -> Vec<ItemResult> {
    results
        .into_iter()
        .map(|result| result.and_then(|_| Err(copy_storage_error(error))))
        .collect()
}

/// A copy of an error of `confirm` (only transient kinds and `Backend` come from it).
fn copy_storage_error(error: &StorageError) -> StorageError {
    match error {
        StorageError::ReplicationTimeout {
            operation,
            wanted,
            confirmed,
        } => StorageError::ReplicationTimeout {
            operation,
            wanted: *wanted,
            confirmed: *confirmed,
        },
        StorageError::Timeout { operation, message } => StorageError::Timeout {
            operation,
            message: message.clone(),
        },
        StorageError::ConnectionLost { operation, message } => StorageError::ConnectionLost {
            operation,
            message: message.clone(),
        },
        other => StorageError::Backend {
            operation: OPERATION,
            message: other.to_string(),
        },
    }
}

fn not_sent() -> StorageError {
    StorageError::ConnectionLost {
        operation: OPERATION,
        message: "not sent: the connection failed earlier in this call".to_owned(),
    }
}

/// The bytes one item counts for in a round (or a batch of single schedules): its payload
/// and id.
pub(crate) fn item_bytes(task: &NewTask) -> usize {
    task.payload.len() + task.id.as_str().len()
}

/// Cuts the valid items into rounds by count and payload size, keeping their order.
fn rounds(items: &[(Partition, NewTask)], valid: &[usize]) -> Vec<Vec<usize>> {
    let mut pipelines = Vec::new();
    let mut rest = valid;
    while !rest.is_empty() {
        let weights = rest.iter().map(|&index| item_bytes(&items[index].1));
        let (round, left) = rest.split_at(round_len(weights, PIPELINE_ITEMS, PIPELINE_BYTES));
        pipelines.push(round.to_vec());
        rest = left;
    }
    pipelines
}

fn mode_arg(mode: ScheduleMode) -> &'static str {
    match mode {
        ScheduleMode::Upsert => "upsert",
        ScheduleMode::IfAbsent => "if_absent",
        ScheduleMode::Earlier => "earlier",
        ScheduleMode::Later => "later",
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
        results.push(parse_verdict(operation, tasks_key, id, &verdict));
    }
    Ok(results)
}

/// One verdict of `schedule.lua` (`C`, `R<previous due>`, `K<due>`, `D`, `X<reason>`) for `id`.
pub(crate) fn parse_verdict(
    operation: &'static str,
    tasks_key: &str,
    id: &TaskId,
    verdict: &str,
) -> ItemResult {
    let (code, detail) = verdict.split_at(verdict.chars().next().map_or(0, char::len_utf8));
    let due = || detail.parse::<u64>().ok();
    match (code, due()) {
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
    }
}
