//! The in-memory backend: the same semantics as the Redis backend, in process.
//!
//! It serves the embedded demo, users' unit tests, and simulations of many nodes in one
//! process (clones of a [`MemoryStore`] share one state). It is held to the same
//! conformance suite as the Redis backend.
//!
//! # Implementation
//! Each partition is a [`PartitionState`] behind its own mutex: every operation on a
//! partition takes the lock once and runs to completion, which gives the atomicity that the
//! Redis backend gets from one Lua script per partition slot. Pending, in-flight, dead and
//! done tasks are indexed by time in ordered sets, so claiming, peeking and requeueing cost
//! `O(log n)` per task, not a scan.

mod index;
mod partition;
mod recurring;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};

use self::partition::{PartitionState, StaleLease};
use crate::error::{StorageError, StorageResult};
use crate::flow::{check_layout, FlowLimits, FlowLimitsByQueue, HeldKey, QueueLayout};
use crate::model::{
    validate_due, AckOutcome, Cancel, ClaimBatch, DeadTask, FailAction, FailOutcome, LeaseToken,
    LookReport, LookRequest, NewTask, Partition, PartitionStats, QueueName, ScheduleMode,
    ScheduleOutcome, StoreOptions, TaskId, TaskInfo,
};
use crate::store::{ItemResult, TaskStore};

/// The most partitions a queue may have (the same bound as the Redis backend).
const MAX_PARTITIONS: u32 = 65_536;

/// The longest last-error text kept, in bytes (the same bound as the Redis backend).
const MAX_ERROR_BYTES: usize = 4096;

/// `error` cut to [`MAX_ERROR_BYTES`] at a character boundary: a handler's error can be a
/// whole page of output, and a dead letter keeps it for as long as it stays dead.
fn bounded_error(error: &str) -> &str {
    let mut end = error.len().min(MAX_ERROR_BYTES);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

/// The holders of a queue's global slots: node -> (slots held, lease deadline ms).
type SlotHolders = HashMap<String, (u64, u64)>;

/// A clock in milliseconds since the Unix epoch.
type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The in-memory task store.
///
/// Cloning is cheap and the clones share one state, so several in-process "nodes" can work
/// on the same store.
///
/// ```
/// use delayq_storage::{MemoryStore, NewTask, Partition, QueueName, ScheduleMode, TaskId, TaskStore};
/// # async fn demo() -> Result<(), delayq_storage::StorageError> {
/// let store = MemoryStore::new(Default::default());
/// let node_b = store.clone(); // sees the same tasks
/// let partition = Partition::new(QueueName::new("reminders")?, 0);
/// store.register_queue(&partition.queue, 1).await?;
/// let task = NewTask { id: TaskId::new("r-1")?, due_ms: 1_000, payload: "hi".into(), traceparent: None };
/// store.schedule(&partition, task, ScheduleMode::Upsert).await?;
/// let batch = node_b.claim_due(&partition, 1_000, 10, 31_000, "node-b").await?;
/// assert_eq!(batch.tasks.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: StoreOptions,
    clock: Clock,
    queues: RwLock<BTreeMap<QueueName, QueueLayout>>,
    /// The per-key limits of queues with flow keys, as `set_flow_limits` gave them.
    flow_limits: FlowLimitsByQueue,
    partitions: RwLock<HashMap<Partition, Arc<Mutex<PartitionState>>>>,
    /// The recurring schedules (one lock: the shards of the Redis backend are only a way to
    /// spread them over a cluster's masters).
    recurring: Mutex<BTreeMap<String, recurring::Schedule>>,
    /// Paused queues, with when they were paused.
    paused: RwLock<BTreeMap<QueueName, u64>>,
    /// Fire tokens taken per (queue, rate window start).
    rate_windows: Mutex<HashMap<(QueueName, u64), u64>>,
    /// Global slots per queue: node -> (held, lease deadline ms).
    global_slots: Mutex<HashMap<QueueName, SlotHolders>>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("options", &self.inner.options)
            .field("queues", &*self.inner.queues.read())
            .field("partitions", &self.inner.partitions.read().len())
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch on this machine's clock.
fn system_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl MemoryStore {
    /// A new empty store on the system clock.
    pub fn new(options: StoreOptions) -> Self {
        Self::with_clock(options, Arc::new(system_clock_ms))
    }

    /// A new empty store on the given clock (milliseconds since the epoch), which stamps
    /// completions and dead letters and ages done records for dedup.
    pub fn with_clock(options: StoreOptions, clock: Arc<dyn Fn() -> u64 + Send + Sync>) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                options,
                clock,
                queues: RwLock::new(BTreeMap::new()),
                flow_limits: FlowLimitsByQueue::default(),
                partitions: RwLock::new(HashMap::new()),
                recurring: Mutex::new(BTreeMap::new()),
                paused: RwLock::new(BTreeMap::new()),
                rate_windows: Mutex::new(HashMap::new()),
                global_slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        (self.inner.clock)()
    }

    /// Fails with `NoSuchPartition` when the queue is registered with fewer partitions.
    fn check_partition(&self, partition: &Partition) -> StorageResult<()> {
        match self.inner.queues.read().get(&partition.queue) {
            Some(&QueueLayout { partitions, .. }) if partition.index >= partitions => {
                Err(StorageError::NoSuchPartition {
                    queue: partition.queue.to_string(),
                    index: partition.index,
                    partitions,
                })
            }
            _ => Ok(()),
        }
    }

    /// The partition's state, created on first write.
    fn partition(&self, partition: &Partition) -> StorageResult<Arc<Mutex<PartitionState>>> {
        self.check_partition(partition)?;
        if let Some(state) = self.inner.partitions.read().get(partition) {
            return Ok(Arc::clone(state));
        }
        let mut partitions = self.inner.partitions.write();
        Ok(Arc::clone(partitions.entry(partition.clone()).or_default()))
    }

    /// The partition's state if anything was ever written to it.
    fn existing(&self, partition: &Partition) -> StorageResult<Option<Arc<Mutex<PartitionState>>>> {
        self.check_partition(partition)?;
        Ok(self.inner.partitions.read().get(partition).cloned())
    }

    /// Validates and schedules one task.
    fn schedule_one(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        let max = self.inner.options.max_payload;
        if task.payload.len() > max {
            return Err(StorageError::PayloadTooLarge {
                id: task.id.to_string(),
                size: task.payload.len(),
                max,
            });
        }
        validate_due(task.due_ms)?;
        let state = self.partition(partition)?;
        let now_ms = self.now_ms();
        let outcome =
            state
                .lock()
                .schedule(task, mode, now_ms, self.inner.options.executed_retention_ms);
        Ok(outcome)
    }
}

fn stale(token: &LeaseToken) -> impl FnOnce(StaleLease) -> StorageError + '_ {
    move |StaleLease| StorageError::StaleLease {
        partition: token.partition.to_string(),
        id: token.id.to_string(),
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn set_paused(
        &self,
        queue: &QueueName,
        _partitions: u32,
        paused: bool,
    ) -> StorageResult<()> {
        let mut set = self.inner.paused.write();
        if paused {
            let now = self.now_ms();
            set.entry(queue.clone()).or_insert(now);
        } else {
            set.remove(queue);
        }
        Ok(())
    }

    async fn paused_queues(&self) -> StorageResult<Vec<(QueueName, u64)>> {
        let set = self.inner.paused.read();
        Ok(set
            .iter()
            .map(|(queue, &since)| (queue.clone(), since))
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
        let mut windows = self.inner.rate_windows.lock();
        // Forget windows older than two periods (the Redis counters expire likewise).
        let horizon = window_start_ms.saturating_sub(period_ms.saturating_mul(2));
        windows.retain(|(_, start), _| *start >= horizon);
        let used = windows.entry((queue.clone(), window_start_ms)).or_insert(0);
        let grant = wanted.min(limit.saturating_sub(*used));
        *used += grant;
        Ok(grant)
    }

    async fn acquire_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        limit: u64,
        wanted: u64,
        lease_ms: u64,
    ) -> StorageResult<u64> {
        let now = self.now_ms();
        let mut queues = self.inner.global_slots.lock();
        let holders = queues.entry(queue.clone()).or_default();
        holders.retain(|_, (_, deadline)| *deadline > now);
        let held: u64 = holders.values().map(|(count, _)| count).sum();
        let grant = wanted.min(limit.saturating_sub(held));
        if grant > 0 || holders.contains_key(node) {
            let entry = holders.entry(node.to_owned()).or_insert((0, 0));
            entry.0 += grant;
            entry.1 = now + lease_ms;
        }
        Ok(grant)
    }

    async fn release_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        count: u64,
    ) -> StorageResult<()> {
        let mut queues = self.inner.global_slots.lock();
        if let Some(holders) = queues.get_mut(queue) {
            if let Some(entry) = holders.get_mut(node) {
                entry.0 = entry.0.saturating_sub(count);
                if entry.0 == 0 {
                    holders.remove(node);
                }
            }
        }
        Ok(())
    }

    async fn delete_queue(&self, queue: &QueueName, _partitions: u32) -> StorageResult<u64> {
        // Every partition of the queue, whatever its index, like the Redis backend's sweep.
        let dropped: Vec<Arc<Mutex<PartitionState>>> = {
            let mut partitions = self.inner.partitions.write();
            let doomed: Vec<Partition> = partitions
                .keys()
                .filter(|partition| &partition.queue == queue)
                .cloned()
                .collect();
            doomed
                .iter()
                .filter_map(|partition| partitions.remove(partition))
                .collect()
        };
        let now_ms = self.now_ms();
        let removed = dropped
            .iter()
            .map(|state| {
                let stats = state.lock().stats(now_ms);
                stats.pending + stats.inflight + stats.dead
            })
            .sum();
        self.inner.paused.write().remove(queue);
        self.inner.queues.write().remove(queue);
        Ok(removed)
    }

    async fn register_layout(
        &self,
        queue: &QueueName,
        partitions: u32,
        flow_keys: Option<bool>,
    ) -> StorageResult<QueueLayout> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(StorageError::InvalidPartitionCount {
                queue: queue.to_string(),
                partitions,
            });
        }
        let mut queues = self.inner.queues.write();
        let asked = QueueLayout {
            partitions,
            flow_keys: flow_keys.unwrap_or(false),
        };
        let recorded = queues.get(queue).copied().unwrap_or(asked);
        check_layout(queue, &recorded, partitions, flow_keys)?;
        queues.insert(queue.clone(), recorded);
        Ok(recorded)
    }

    async fn queue_layouts(&self) -> StorageResult<Vec<(QueueName, QueueLayout)>> {
        let queues = self.inner.queues.read();
        Ok(queues
            .iter()
            .map(|(name, layout)| (name.clone(), *layout))
            .collect())
    }

    async fn set_flow_limits(&self, queue: &QueueName, limits: FlowLimits) -> StorageResult<()> {
        let flow_keys = self
            .inner
            .queues
            .read()
            .get(queue)
            .is_some_and(|layout| layout.flow_keys);
        self.inner.flow_limits.set(queue, limits, flow_keys)
    }

    async fn held_keys(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<HeldKey>> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().held_keys(limit),
            None => Vec::new(),
        })
    }

    async fn schedule(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.schedule_one(partition, task, mode)
    }

    async fn schedule_many(
        &self,
        items: Vec<(Partition, NewTask)>,
        mode: ScheduleMode,
    ) -> StorageResult<Vec<ItemResult>> {
        Ok(items
            .into_iter()
            .map(|(partition, task)| self.schedule_one(&partition, task, mode))
            .collect())
    }

    async fn cancel(&self, partition: &Partition, id: &TaskId) -> StorageResult<Cancel> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().cancel(id),
            None => Cancel::NotFound,
        })
    }

    async fn get(&self, partition: &Partition, id: &TaskId) -> StorageResult<Option<TaskInfo>> {
        let Some(state) = self.existing(partition)? else {
            return Ok(None);
        };
        let now_ms = self.now_ms();
        let info = state
            .lock()
            .get(id, now_ms, self.inner.options.executed_retention_ms);
        Ok(info)
    }

    async fn claim_due(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<ClaimBatch> {
        if self.inner.paused.read().contains_key(&partition.queue) {
            return Ok(ClaimBatch {
                paused: true,
                ..ClaimBatch::default()
            });
        }
        let Some(state) = self.existing(partition)? else {
            return Ok(ClaimBatch::default());
        };
        let request = partition::ClaimRequest {
            now_ms,
            limit,
            lease_deadline_ms,
            owner,
            max_bytes: self.inner.options.max_claim_bytes,
            flow: self.inner.flow_limits.of(&partition.queue),
        };
        let batch = state.lock().claim_due(partition, &request);
        tracing::trace!(%partition, owner, claimed = batch.tasks.len(), "claimed due tasks");
        Ok(batch)
    }

    async fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> StorageResult<ClaimBatch> {
        Ok(match self.existing(partition)? {
            Some(state) => state
                .lock()
                .recover_claim(partition, owner, lease_deadline_ms),
            None => ClaimBatch::default(),
        })
    }

    async fn peek_window(
        &self,
        partition: &Partition,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().peek_window(from_ms, to_ms, limit),
            None => Vec::new(),
        })
    }

    async fn look(
        &self,
        partition: &Partition,
        request: &LookRequest,
    ) -> StorageResult<LookReport> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().look(request),
            None => LookReport::default(),
        })
    }

    async fn ack(&self, token: &LeaseToken) -> StorageResult<AckOutcome> {
        let state = self.partition(&token.partition)?;
        let now_ms = self.now_ms();
        let retention_ms = self.inner.options.executed_retention_ms;
        let completed = state.lock().ack(token, now_ms, retention_ms);
        let completed = completed.map_err(stale(token))?;
        Ok(if completed {
            AckOutcome::Completed
        } else {
            AckOutcome::Superseded
        })
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
        let state = self.partition(&token.partition)?;
        let now_ms = self.now_ms();
        let outcome = state
            .lock()
            .fail(token, bounded_error(error), action, now_ms);
        outcome.map_err(stale(token))
    }

    async fn renew(&self, token: &LeaseToken, lease_deadline_ms: u64) -> StorageResult<()> {
        let state = self.partition(&token.partition)?;
        let renewed = state.lock().renew(token, lease_deadline_ms);
        renewed.map_err(stale(token))
    }

    async fn requeue_expired(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<TaskId>> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().requeue_expired(now_ms, limit),
            None => Vec::new(),
        })
    }

    async fn prune_done(
        &self,
        partition: &Partition,
        older_than_ms: u64,
        limit: usize,
    ) -> StorageResult<u64> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().prune_done(older_than_ms, limit),
            None => 0,
        })
    }

    async fn stats(&self, partition: &Partition, now_ms: u64) -> StorageResult<PartitionStats> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().stats(now_ms),
            None => PartitionStats::default(),
        })
    }

    async fn list_dead(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<DeadTask>> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().list_dead(limit),
            None => Vec::new(),
        })
    }

    async fn peek_dead(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().peek_dead(limit),
            None => Vec::new(),
        })
    }

    async fn retry_dead(
        &self,
        partition: &Partition,
        id: &TaskId,
        due_ms: u64,
    ) -> StorageResult<bool> {
        validate_due(due_ms)?;
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().retry_dead(id, due_ms),
            None => false,
        })
    }

    async fn purge_dead(&self, partition: &Partition, id: Option<&TaskId>) -> StorageResult<u64> {
        Ok(match self.existing(partition)? {
            Some(state) => state.lock().purge_dead(id),
            None => 0,
        })
    }
}
