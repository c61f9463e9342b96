//! What operators see and do beside scheduling: the next pending tasks of a queue, dead
//! letters (list, retry, purge), the flow keys holding tasks back, the live nodes with the
//! partitions each owns, readiness, and the node gauges of the metrics. The `delayq` command
//! line and `delayq-http` use these.
//!
//! A listing of N entries (`pending`, `dead_letters`; N in 1..=[`MAX_LIST_LIMIT`], else
//! [`EngineError::InvalidLimit`]) reads at most N records
//! from the store overall: first the ids and scores of up to N entries of each partition (a
//! queue is spread over its partitions), merged and cut to N, then the records of only those
//! N. The payloads come whole; the HTTP API and the command line cut them to a preview.
//! `held_keys` reads up to N keys per partition (a key lives in one partition) and keeps the
//! N with the most waiting.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;

use bytes::Bytes;
use delayq_coordinator::NodeInfo;
use delayq_storage::{
    DeadTask, HeldKey, Partition, QueueName, ScheduleOutcome, StorageError, StorageResult, TaskId,
    TaskState, MAX_DUE_MS,
};
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::error::{EngineError, EngineResult};
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;

/// The most entries one listing returns: a larger limit is refused
/// ([`EngineError::InvalidLimit`]).
pub const MAX_LIST_LIMIT: usize = 1_000;
/// Partitions read at once by a listing.
const READ_CONCURRENCY: usize = 16;
/// Dead letters read per round of a retry of all.
const RETRY_CHUNK: usize = 500;

/// A pending task (waiting for its due time, or for a retry), as `delayq pending` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTask {
    /// The task's id.
    pub id: String,
    /// When it is due, in cluster milliseconds.
    pub due_ms: u64,
    /// The attempt it will be (above 1 for a retry waiting for its backoff).
    pub attempt: u32,
    /// Bumped each time the id is scheduled again.
    pub generation: u64,
    /// The payload as scheduled.
    pub payload: Bytes,
    /// The error of the previous attempt, for a retry.
    pub last_error: Option<String>,
}

/// A live node with the partitions it owns, as `delayq nodes` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// What the node registered: id, name, host, pid, version, start and heartbeat times.
    pub info: NodeInfo,
    /// Partitions owned per queue (queues where it owns none are left out).
    pub partitions_by_queue: BTreeMap<String, usize>,
    /// Partitions owned in all.
    pub partitions: usize,
    /// How long ago its heartbeat was refreshed, on the cluster clock.
    pub heartbeat_age_ms: u64,
}

/// Whether this scheduler can serve: the store answers and, for a member, it has joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// `None` when the store answered; else why not.
    pub store_error: Option<String>,
    /// Whether this scheduler runs handlers (and so must be a member of the cluster).
    pub member: bool,
    /// Whether it is in the membership now (always false for a producer).
    pub joined: bool,
}

impl Readiness {
    /// Ready: the store answers, and a member has joined.
    pub fn is_ready(&self) -> bool {
        self.store_error.is_none() && (!self.member || self.joined)
    }
}

impl Scheduler {
    /// The next `limit` (1..=[`MAX_LIST_LIMIT`]) pending tasks of `queue` by due time,
    /// retries waiting for their backoff included. Empty for an unknown queue.
    ///
    /// Reads the ids and due times of up to `limit` pending tasks per partition, keeps the
    /// first `limit` overall, then reads the records of only those, so at most `limit`
    /// records come from the store. A task claimed or cancelled in between is left out.
    pub async fn pending(&self, queue: &str, limit: usize) -> EngineResult<Vec<PendingTask>> {
        let queue = QueueName::new(queue)?;
        let limit = checked_limit(limit)?;
        let Some(partitions) = self.partitions_for_read(&queue).await? else {
            return Ok(Vec::new());
        };
        let store = self.store();
        let entries = first_entries(&queue, partitions, limit, |partition| {
            let store = store.clone();
            async move { store.peek_window(&partition, 0, MAX_DUE_MS, limit).await }
        })
        .await?;
        let details: Vec<Option<PendingTask>> = stream::iter(entries)
            .map(|(_, id, index)| {
                let store = store.clone();
                let partition = Partition::new(queue.clone(), index);
                async move {
                    let info = store.get(&partition, &id).await?;
                    // Claimed or cancelled since the listing: no longer pending.
                    Ok::<_, StorageError>(info.filter(|info| info.state == TaskState::Pending).map(
                        |info| PendingTask {
                            id: info.id.as_str().to_owned(),
                            due_ms: info.due_ms,
                            attempt: info.attempt,
                            generation: info.generation,
                            payload: info.payload,
                            last_error: info.last_error,
                        },
                    ))
                }
            })
            .buffered(READ_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(details.into_iter().flatten().collect())
    }

    /// The oldest `limit` (1..=[`MAX_LIST_LIMIT`]) dead letters of `queue`, by the time they
    /// failed (ties by id), with their last error and attempts. Empty for an unknown queue.
    ///
    /// Reads the ids and failure times of up to `limit` dead letters per partition, keeps the
    /// oldest `limit` overall, then reads the records of only those (one read per partition
    /// holding some), so at most `limit` records come from the store whatever the number of
    /// partitions. A dead letter retried or purged in between is left out.
    pub async fn dead_letters(&self, queue: &str, limit: usize) -> EngineResult<Vec<DeadTask>> {
        let queue = QueueName::new(queue)?;
        let limit = checked_limit(limit)?;
        let Some(partitions) = self.partitions_for_read(&queue).await? else {
            return Ok(Vec::new());
        };
        let store = self.store();
        let entries = first_entries(&queue, partitions, limit, |partition| {
            let store = store.clone();
            async move { store.peek_dead(&partition, limit).await }
        })
        .await?;
        // The ids kept from a partition are its oldest: its first `ids.len()` dead letters,
        // unless some were retried or purged since (then the ones after them are not kept).
        let mut shown: BTreeMap<u32, HashSet<TaskId>> = BTreeMap::new();
        for (_, id, index) in entries {
            shown.entry(index).or_default().insert(id);
        }
        let mut dead: Vec<DeadTask> = stream::iter(shown)
            .map(|(index, ids)| {
                let store = store.clone();
                let partition = Partition::new(queue.clone(), index);
                async move {
                    let listed = store.list_dead(&partition, ids.len()).await?;
                    Ok::<_, StorageError>(
                        listed
                            .into_iter()
                            .filter(|task| ids.contains(&task.id))
                            .collect::<Vec<_>>(),
                    )
                }
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_concat()
            .await?;
        dead.sort_by(|a, b| (a.failed_ms, &a.id).cmp(&(b.failed_ms, &b.id)));
        Ok(dead)
    }

    /// Up to `limit` (1..=[`MAX_LIST_LIMIT`]) flow keys of `queue` holding tasks back (as
    /// `delayq keys` lists them): the keys with the most tasks waiting first (ties by key),
    /// each with its tasks running (holding a slot) and waiting, and the earliest due among
    /// the waiting ones. Empty for an unknown queue and for a queue without `flow_keys`.
    ///
    /// Reads up to `limit` keys of each partition (16 partitions at once)
    /// and keeps the first `limit` overall: the tasks of a key share one partition, so no key
    /// is listed twice.
    pub async fn held_keys(&self, queue: &str, limit: usize) -> EngineResult<Vec<HeldKey>> {
        let queue = QueueName::new(queue)?;
        let limit = checked_limit(limit)?;
        let Some(layout) = self.layout_for_read(&queue).await? else {
            return Ok(Vec::new());
        };
        if !layout.flow_keys {
            return Ok(Vec::new());
        }
        let store = self.store();
        let mut keys: Vec<HeldKey> = stream::iter(0..layout.partitions)
            .map(|index| {
                let store = store.clone();
                let partition = Partition::new(queue.clone(), index);
                async move { store.held_keys(&partition, limit).await }
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_concat()
            .await?;
        keys.sort_by(|a, b| b.waiting.cmp(&a.waiting).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(limit);
        tracing::debug!(queue = %queue, keys = keys.len(), "read the held keys");
        Ok(keys)
    }

    /// Schedules the dead letter `id` again, due now with attempt 1, and wakes its owner.
    /// Returns whether it was dead.
    pub async fn retry_dead(&self, queue: &str, id: &str) -> EngineResult<bool> {
        let Some(partition) = self.partition_of_known(queue, id).await? else {
            return Ok(false);
        };
        let id = TaskId::new(id)?;
        let now = self.now_ms();
        let retried = self.store().retry_dead(&partition, &id, now).await?;
        if retried {
            self.announce(&partition, now, now, &ScheduleOutcome::Created)
                .await;
        }
        Ok(retried)
    }

    /// Schedules every dead letter of `queue` again, due now with attempt 1. Returns how
    /// many. A task that dies again while this runs is not retried twice.
    pub async fn retry_all_dead(&self, queue: &str) -> EngineResult<u64> {
        let queue = QueueName::new(queue)?;
        let Some(partitions) = self.partitions_for_read(&queue).await? else {
            return Ok(0);
        };
        let store = self.store();
        let mut retried = 0u64;
        for index in 0..partitions {
            let partition = Partition::new(queue.clone(), index);
            let mut seen: HashSet<TaskId> = HashSet::new();
            loop {
                let now = self.now_ms();
                // Ids only: a retry needs no payload.
                let dead = store.peek_dead(&partition, RETRY_CHUNK).await?;
                let fresh: Vec<TaskId> = dead
                    .into_iter()
                    .map(|(id, _)| id)
                    .filter(|id| !seen.contains(id))
                    .collect();
                if fresh.is_empty() {
                    break;
                }
                for id in fresh {
                    if store.retry_dead(&partition, &id, now).await? {
                        retried += 1;
                    }
                    seen.insert(id);
                }
                self.announce(&partition, now, now, &ScheduleOutcome::Created)
                    .await;
            }
        }
        Ok(retried)
    }

    /// Deletes the dead letter `id`. Returns whether it was dead.
    pub async fn purge_dead(&self, queue: &str, id: &str) -> EngineResult<bool> {
        let Some(partition) = self.partition_of_known(queue, id).await? else {
            return Ok(false);
        };
        let id = TaskId::new(id)?;
        Ok(self.store().purge_dead(&partition, Some(&id)).await? > 0)
    }

    /// Deletes every dead letter of `queue`. Returns how many.
    pub async fn purge_all_dead(&self, queue: &str) -> EngineResult<u64> {
        let queue = QueueName::new(queue)?;
        let Some(partitions) = self.partitions_for_read(&queue).await? else {
            return Ok(0);
        };
        let store = self.store();
        let counts: Vec<u64> = stream::iter(0..partitions)
            .map(|index| {
                let store = store.clone();
                let partition = Partition::new(queue.clone(), index);
                async move { store.purge_dead(&partition, None).await }
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(counts.into_iter().sum())
    }

    /// The live nodes (the members of the cluster) with the partitions each owns, sorted by
    /// id. Registry entries of nodes that are no longer members are left out.
    ///
    /// Each `(queue, partition)`'s owner is computed once (O(members × partitions in all)),
    /// and the counts are cached until the membership or the queue registry changes, so a
    /// repeated call costs the registry reads and no hashing. Heartbeat ages are fresh on
    /// every call.
    pub async fn nodes(&self) -> EngineResult<Vec<NodeStatus>> {
        let nodes = self.coordinator().nodes().await?;
        let queues = self.store().queues().await?;
        let ownership = self.reads.ownership.get(self.membership(), queues).await;
        let now_ms = self.now_ms();
        Ok(nodes
            .into_iter()
            .filter_map(|info| {
                let owned = ownership.get(&info.id)?;
                Some(NodeStatus {
                    partitions: owned.total,
                    partitions_by_queue: owned.by_queue.clone(),
                    heartbeat_age_ms: now_ms.saturating_sub(info.last_heartbeat_ms),
                    info,
                })
            })
            .collect())
    }

    /// Whether this scheduler can serve now (`/readyz`): the store answers a read and, when
    /// it runs handlers, it is a member of the cluster.
    pub async fn readiness(&self) -> Readiness {
        let store_error = match self.store().queues().await {
            Ok(_) => None,
            Err(error) => Some(error.to_string()),
        };
        Readiness {
            store_error,
            member: self.runtime.is_member(),
            joined: self.membership().contains(self.node_id()),
        }
    }

    /// The partition of `id` in `queue`, or `None` when the store does not know the queue.
    async fn partition_of_known(&self, queue: &str, id: &str) -> EngineResult<Option<Partition>> {
        let queue = QueueName::new(queue)?;
        let id = TaskId::new(id)?;
        let Some(layout) = self.layout_for_read(&queue).await? else {
            return Ok(None);
        };
        Ok(Some(Partition::new(queue, layout.partition_of(&id))))
    }
}

/// The first `limit` entries of `queue` over its `partitions`, by score (due or failure time),
/// then id, then partition: `peek` reads each partition's first `limit` `(id, score)` pairs
/// ([`READ_CONCURRENCY`] partitions at once), and the merge keeps the first `limit` overall.
async fn first_entries<Peek, Read>(
    queue: &QueueName,
    partitions: u32,
    limit: usize,
    peek: Peek,
) -> EngineResult<Vec<(u64, TaskId, u32)>>
where
    Peek: Fn(Partition) -> Read,
    Read: Future<Output = StorageResult<Vec<(TaskId, u64)>>>,
{
    let mut entries: Vec<(u64, TaskId, u32)> = stream::iter(0..partitions)
        .map(|index| {
            let read = peek(Partition::new(queue.clone(), index));
            async move {
                let peeked = read.await?;
                Ok::<_, StorageError>(
                    peeked
                        .into_iter()
                        .map(|(id, score)| (score, id, index))
                        .collect::<Vec<_>>(),
                )
            }
        })
        .buffer_unordered(READ_CONCURRENCY)
        .try_concat()
        .await?;
    entries.sort();
    entries.truncate(limit);
    Ok(entries)
}

/// `limit` when it is in 1..=[`MAX_LIST_LIMIT`], else [`EngineError::InvalidLimit`] naming it
/// (the HTTP API and the command line refuse such a limit too).
fn checked_limit(limit: usize) -> EngineResult<usize> {
    if (1..=MAX_LIST_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(EngineError::InvalidLimit {
            limit,
            max: MAX_LIST_LIMIT,
        })
    }
}

/// Counts a schedule that stored a task (`delayq_tasks_scheduled_total`).
pub(crate) fn record_scheduled(queue: &QueueName, outcome: &ScheduleOutcome) {
    if matches!(
        outcome,
        ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. }
    ) {
        metrics::counter!("delayq_tasks_scheduled_total", "queue" => queue.as_str().to_owned())
            .increment(1);
    }
}

/// Sets the node gauges: members seen, prefetched timer entries, partitions owned per
/// queue served (zero for a queue whose partitions all moved away).
pub(crate) fn record_node_gauges(runtime: &Runtime) {
    let membership = runtime.coordinator.membership().borrow().clone();
    metrics::gauge!("delayq_cluster_members").set(membership.members.len() as f64);
    metrics::gauge!("delayq_prefetched_tasks").set(runtime.timer.len() as f64);
    let mut owned: BTreeMap<String, usize> = runtime
        .queues
        .iter()
        .map(|queue| (queue.name.as_str().to_owned(), 0))
        .collect();
    for partition in runtime.workers.lock().keys() {
        *owned
            .entry(partition.queue.as_str().to_owned())
            .or_insert(0) += 1;
    }
    for (queue, count) in owned {
        metrics::gauge!("delayq_partitions_owned", "queue" => queue).set(count as f64);
    }
}

impl Scheduler {
    /// The configuration this scheduler runs with (the HTTP layer reads its limits).
    pub fn config(&self) -> &crate::config::Config {
        &self.runtime.config
    }

    /// Whether this scheduler runs handlers (a member of the cluster that fires tasks), as
    /// opposed to a producer that only schedules and reads.
    pub fn runs_handlers(&self) -> bool {
        self.runtime.is_member()
    }
}
