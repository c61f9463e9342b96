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

use std::sync::atomic::{AtomicBool, Ordering};

use delayq_redis::{ScriptCall, TopologyKind};
use futures::future::join_all;
use futures::stream::{self, StreamExt};
use redis::Value;

use crate::error::{StorageError, StorageResult};
use crate::model::{validate_due, NewTask, Partition, ScheduleMode, ScheduleOutcome, TaskId};
use crate::store::ItemResult;

use super::batch::{by_partition, round_len};
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
        self.schedules
            .submit_lazily(
                "schedule",
                (self.group_of(partition), mode),
                (partition.clone(), task),
                1,
                || {
                    let store = self.clone();
                    move |(_, mode), items| {
                        let store = store.clone();
                        async move { store.schedule_call(mode, items).await }
                    }
                },
            )
            .await
    }

    /// Schedules validated tasks (of one or more partitions) in one script call; one result
    /// per task. With `wait_replicas`, the stored ones are reported once the replicas
    /// confirmed them.
    async fn schedule_call(
        &self,
        mode: ScheduleMode,
        items: Vec<(Partition, NewTask)>,
    ) -> Vec<ItemResult> {
        const OPERATION: &str = "schedule";
        let groups = by_partition(items.iter().map(|(partition, _)| partition));
        let keys: Vec<PartitionKeys> = groups
            .iter()
            .map(|(partition, _)| self.keys(partition))
            .collect();
        let call_groups: Vec<(&PartitionKeys, Vec<&NewTask>)> = groups
            .iter()
            .zip(&keys)
            .map(|((_, members), keys)| (keys, members.iter().map(|&i| &items[i].1).collect()))
            .collect();
        let call = schedule_call(
            &call_groups,
            mode_arg(mode),
            self.options.executed_retention_ms,
        );
        let mut results: Vec<Option<ItemResult>> = items.iter().map(|_| None).collect();
        match self.invoke_on(&self.producer, &call).await {
            Ok(reply) => {
                let parsed = parse_grouped(OPERATION, &groups, &keys, reply, |i| &items[i].1.id);
                for (index, result) in parsed {
                    results[index] = Some(result);
                }
            }
            Err(error) => {
                for ((_, members), keys) in groups.iter().zip(&keys) {
                    for &index in members {
                        results[index] =
                            Some(Err(map_error(OPERATION, &keys.tasks, copy_error(&error))));
                    }
                }
            }
        }
        let outcomes: Vec<ItemResult> = results
            .into_iter()
            .map(|result| {
                result
                    .unwrap_or_else(|| Err(unexpected_reply(OPERATION, "not one verdict per task")))
            })
            .collect();
        let Some((partition, _)) = groups.first() else {
            return outcomes;
        };
        // One master per call: one WAIT confirms all of it.
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

    /// Sends one round: on a single master one script call for all of it; on a cluster one
    /// call per partition, grouped by slot by the connection layer. Returns an outcome per
    /// item.
    async fn send_round(
        &self,
        items: &[(Partition, NewTask)],
        pipeline: &[usize],
        mode: ScheduleMode,
    ) -> Vec<(usize, ItemResult)> {
        // Groups of round positions, by partition; then the groups of each call.
        let groups = by_partition(pipeline.iter().map(|&index| &items[index].0));
        let keys: Vec<PartitionKeys> = groups
            .iter()
            .map(|(partition, _)| self.keys(partition))
            .collect();
        let calls_of_groups: Vec<Vec<usize>> = match self.firing.kind() {
            TopologyKind::Cluster => (0..groups.len()).map(|group| vec![group]).collect(),
            TopologyKind::Standalone | TopologyKind::Sentinel => vec![(0..groups.len()).collect()],
        };
        let retention = self.options.executed_retention_ms;
        let item_of = |position: usize| &items[pipeline[position]].1;
        let calls: Vec<ScriptCall<'_>> = calls_of_groups
            .iter()
            .map(|members| {
                let call_groups: Vec<(&PartitionKeys, Vec<&NewTask>)> = members
                    .iter()
                    .map(|&group| {
                        let tasks = groups[group].1.iter().map(|&p| item_of(p)).collect();
                        (&keys[group], tasks)
                    })
                    .collect();
                schedule_call(&call_groups, mode_arg(mode), retention)
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
                return pipeline
                    .iter()
                    .map(|&index| (index, Err(mismatch())))
                    .collect();
            }
            Err(error) => {
                return groups
                    .iter()
                    .zip(&keys)
                    .flat_map(|((_, members), keys)| {
                        let error = &error;
                        members.iter().map(move |&position| {
                            (
                                pipeline[position],
                                Err(map_error(OPERATION, &keys.tasks, copy_error(error))),
                            )
                        })
                    })
                    .collect();
            }
        };

        let mut outcomes = Vec::with_capacity(pipeline.len());
        let mut confirmations = Vec::new();
        for (members, reply) in calls_of_groups.iter().zip(replies) {
            let call_groups: Vec<(&Partition, Vec<usize>)> =
                members.iter().map(|&group| groups[group].clone()).collect();
            let call_keys: Vec<PartitionKeys> =
                members.iter().map(|&group| keys[group].clone()).collect();
            let results: Vec<(usize, ItemResult)> = match reply {
                Ok(reply) => {
                    parse_grouped(OPERATION, &call_groups, &call_keys, reply, |position| {
                        &item_of(position).id
                    })
                }
                Err(error) => call_groups
                    .iter()
                    .zip(&call_keys)
                    .flat_map(|((_, positions), keys)| {
                        let error = &error;
                        positions.iter().map(move |&position| {
                            (
                                position,
                                Err(map_error(OPERATION, &keys.tasks, copy_error(error))),
                            )
                        })
                    })
                    .collect(),
            };
            let wrote = results.iter().any(|(_, result)| result.is_ok());
            confirmations.push((call_groups[0].0, wrote));
            outcomes.push(results);
        }
        // With wait_replicas: one WAIT per call (per master, per slot on a cluster) that
        // took writes.
        let confirmed = join_all(confirmations.iter().map(|&(partition, wrote)| async move {
            if wrote {
                self.confirm(Writer::Producer, partition, OPERATION).await
            } else {
                Ok(())
            }
        }))
        .await;
        outcomes
            .into_iter()
            .zip(confirmed)
            .flat_map(|(results, confirmation)| {
                let (positions, results): (Vec<usize>, Vec<ItemResult>) =
                    results.into_iter().unzip();
                let results = match confirmation {
                    Ok(()) => results,
                    Err(error) => unconfirmed(results, &error),
                };
                positions
                    .into_iter()
                    .map(|position| pipeline[position])
                    .zip(results)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// `schedule.lua` with `mode`, retention, then per partition (its nine keys) the count of its
/// tasks and their `(<id> <due> <payload> <traceparent or ''>)`s.
pub(crate) fn schedule_call<'a>(
    groups: &[(&PartitionKeys, Vec<&NewTask>)],
    mode: &str,
    retention_ms: u64,
) -> ScriptCall<'a> {
    let mut call = ScriptCall::new(&SCRIPTS.schedule)
        .arg(mode)
        .arg(retention_ms);
    for (keys, tasks) in groups {
        call = call
            .key(&keys.due)
            .key(&keys.tasks)
            .key(&keys.inflight)
            .key(&keys.done)
            .key(&keys.dead)
            .key(&keys.ticks)
            .key(&keys.traces)
            .key(&keys.flow)
            .key(&keys.parked)
            .arg(tasks.len());
        for task in tasks {
            call = call
                .arg(task.id.as_str())
                .arg(task.due_ms)
                .arg(task.payload.as_ref())
                .arg(task.traceparent.as_ref().map_or("", |trace| trace.as_str()));
        }
    }
    call
}

/// The flat verdicts of one call over `groups` (each: a partition and the positions of its
/// items, `keys` alike), as (position, outcome) in group order.
fn parse_grouped<'a>(
    operation: &'static str,
    groups: &[(&Partition, Vec<usize>)],
    keys: &[PartitionKeys],
    reply: Value,
    id_of: impl Fn(usize) -> &'a TaskId,
) -> Vec<(usize, ItemResult)> {
    let total: usize = groups.iter().map(|(_, members)| members.len()).sum();
    let verdicts = array(reply).filter(|verdicts| verdicts.len() == total);
    let mut verdicts = verdicts.map(Vec::into_iter);
    let mut outcomes = Vec::with_capacity(total);
    for ((_, members), keys) in groups.iter().zip(keys) {
        for &position in members {
            let outcome = match verdicts.as_mut().and_then(Iterator::next).and_then(text) {
                Some(verdict) => parse_verdict(operation, &keys.tasks, id_of(position), &verdict),
                None => Err(unexpected_reply(operation, "not one verdict per item")),
            };
            outcomes.push((position, outcome));
        }
    }
    outcomes
}

/// The stored items of `results` fail with a copy of `error` (too few replicas confirmed
/// them); the others keep their own error.
fn unconfirmed(results: Vec<ItemResult>, error: &StorageError) -> Vec<ItemResult> {
    results
        .into_iter()
        .map(|result| result.and_then(|_| Err(error.copy_for(OPERATION))))
        .collect()
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
