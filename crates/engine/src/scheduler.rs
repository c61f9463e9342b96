//! The [`Scheduler`] handle that applications embed: schedule, cancel, inspect, shut down.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use delayq_coordinator::{ClusterClock, Coordinator, Membership, NodeId, Wakeup};
use delayq_storage::{
    validate_due, Cancel, NewTask, Partition, PartitionStats, QueueLayout, QueueName, ScheduleMode,
    ScheduleOutcome, StorageError, TaskId, TaskInfo, TaskStore, TraceParent,
};
use tokio_util::task::TaskTracker;

use crate::builder::SchedulerBuilder;
use crate::config::Config;
use crate::error::{EngineError, EngineResult};
use crate::runtime::{RunningTask, Runtime};
use crate::task::{Scheduled, When};

/// The handle an application embeds: schedule, cancel and inspect tasks, and (with handlers)
/// run the tasks of this replica's share of the partitions.
///
/// ```no_run
/// use std::time::Duration;
/// use delayq_engine::{config::Config, Scheduler, Task, When};
///
/// # async fn run() -> Result<(), delayq_engine::EngineError> {
/// let config = Config::load_or_default(None)?;
/// let scheduler = Scheduler::builder(config)
///     .handler("order-timeout", |task: Task| async move {
///         tracing::info!(order = %task.id, "cancelling unpaid order");
///         Ok::<(), std::io::Error>(())
///     })
///     .start()
///     .await?;
/// scheduler
///     .schedule("order-timeout", "order-42", When::In(Duration::from_secs(1800)), "{}")
///     .await?;
/// // ... when the payment arrives:
/// scheduler.cancel("order-timeout", "order-42").await?;
/// scheduler.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Scheduler {
    pub(crate) runtime: Arc<Runtime>,
    loops: Arc<TaskTracker>,
    /// What `nodes` and `stats` cache between requests (shared by the clones).
    pub(crate) reads: Arc<crate::read_cache::ReadCaches>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("node", &self.runtime.node_id())
            .finish()
    }
}

/// One item of [`Scheduler::schedule_many`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRequest {
    /// The task's id.
    pub id: String,
    /// When it is due.
    pub when: When,
    /// Its payload.
    pub payload: Bytes,
    /// What to do when the id has a live task ([`ScheduleMode::Upsert`], i.e. replace, by
    /// default); each item has its own.
    pub mode: ScheduleMode,
    /// The trace context the fire's span links to. `None`: the current `tracing` span's
    /// OpenTelemetry context, when a tracing-opentelemetry layer records it; else none.
    pub traceparent: Option<TraceParent>,
}

impl ScheduleRequest {
    /// A request in the default mode (replace).
    pub fn new(id: impl Into<String>, when: When, payload: impl Into<Bytes>) -> Self {
        ScheduleRequest {
            id: id.into(),
            when,
            payload: payload.into(),
            mode: ScheduleMode::default(),
            traceparent: None,
        }
    }

    /// The same request in `mode`.
    pub fn with_mode(mut self, mode: ScheduleMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same request recording `traceparent` (an incoming request's header, say) rather
    /// than the current span's context.
    pub fn with_traceparent(mut self, traceparent: Option<TraceParent>) -> Self {
        self.traceparent = traceparent;
        self
    }
}

impl Scheduler {
    /// A builder for a scheduler with this configuration (Redis backend unless
    /// [`SchedulerBuilder::memory`] is called).
    pub fn builder(config: Config) -> SchedulerBuilder {
        SchedulerBuilder::new(config)
    }

    pub(crate) fn new(runtime: Arc<Runtime>) -> Self {
        Scheduler {
            runtime,
            loops: Arc::new(TaskTracker::new()),
            reads: Arc::default(),
        }
    }

    /// The runtime's long-running loops (timer, wake-ups, ownership, gauges).
    pub(crate) fn loops(&self) -> &TaskTracker {
        &self.loops
    }

    /// This node's id.
    pub fn node_id(&self) -> &NodeId {
        self.runtime.coordinator.node_id()
    }

    /// Now on the cluster clock, in milliseconds since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.runtime.clock.now_ms()
    }

    /// The cluster clock.
    pub fn clock(&self) -> Arc<ClusterClock> {
        self.runtime.clock.clone()
    }

    /// The current membership as this node sees it.
    pub fn membership(&self) -> Membership {
        self.runtime.coordinator.membership().borrow().clone()
    }

    /// The partitions this node owns now, sorted.
    pub fn owned_partitions(&self) -> Vec<Partition> {
        let mut owned: Vec<Partition> = self.runtime.workers.lock().keys().cloned().collect();
        owned.sort();
        owned
    }

    /// How many `(due, partition)` entries the timer holds now (prefetched or armed).
    pub fn prefetched(&self) -> usize {
        self.runtime.timer.len()
    }

    /// How many handler executions are running now.
    pub fn running_tasks(&self) -> usize {
        self.runtime.running.lock().len()
    }

    /// The task store (for inspection and dead-letter management).
    pub fn store(&self) -> Arc<dyn TaskStore> {
        self.runtime.store.clone()
    }

    /// The coordinator (for `nodes`).
    pub fn coordinator(&self) -> Arc<dyn Coordinator> {
        self.runtime.coordinator.clone()
    }

    /// Schedules (or replaces: upsert) the task `id` of `queue`.
    pub async fn schedule(
        &self,
        queue: &str,
        id: &str,
        when: When,
        payload: impl Into<Bytes>,
    ) -> EngineResult<Scheduled> {
        self.schedule_with(queue, id, when, payload, ScheduleMode::Upsert)
            .await
    }

    /// Schedules the task with a JSON payload.
    pub async fn schedule_json<T: serde::Serialize>(
        &self,
        queue: &str,
        id: &str,
        when: When,
        payload: &T,
    ) -> EngineResult<Scheduled> {
        let bytes = serde_json::to_vec(payload).map_err(|error| EngineError::InvalidPayload {
            id: id.to_owned(),
            reason: error.to_string(),
        })?;
        self.schedule(queue, id, when, bytes).await
    }

    /// Schedules the task unless a live task with this id exists; then that one is kept
    /// (`kept: true`, with its due).
    pub async fn schedule_if_absent(
        &self,
        queue: &str,
        id: &str,
        when: When,
        payload: impl Into<Bytes>,
    ) -> EngineResult<Scheduled> {
        self.schedule_with(queue, id, when, payload, ScheduleMode::IfAbsent)
            .await
    }

    /// Schedules the task `id` of `queue` in `mode`: what happens when the id already has a
    /// live task. [`ScheduleMode::Upsert`] (`replace`) replaces it (a debounce: each
    /// schedule moves the deadline), [`ScheduleMode::IfAbsent`] keeps it (the first schedule
    /// wins), [`ScheduleMode::Earlier`] / [`ScheduleMode::Later`] keep whichever of the two
    /// dues is earlier / later, with its payload. The answer's `kept` says the live task was
    /// kept (`due_ms` is then its due); see [`ScheduleMode`] for tasks in flight or dead.
    /// An id without a live task is scheduled in every mode, and a schedule that already
    /// fired (same id and due) is a `duplicate` in every mode (guarantee 6).
    pub async fn schedule_with(
        &self,
        queue: &str,
        id: &str,
        when: When,
        payload: impl Into<Bytes>,
        mode: ScheduleMode,
    ) -> EngineResult<Scheduled> {
        let request = ScheduleRequest::new(id, when, payload).with_mode(mode);
        self.schedule_request(queue, request).await
    }

    /// Schedules one task as `request` says (its mode, and the trace context its fire links
    /// to: the request's, else the current span's).
    pub async fn schedule_request(
        &self,
        queue: &str,
        request: ScheduleRequest,
    ) -> EngineResult<Scheduled> {
        let PreparedTask {
            partition,
            task,
            mode,
            now,
        } = self.prepare(queue, request).await?;
        let (id, due_ms) = (task.id.clone(), task.due_ms);
        let outcome = match self.runtime.store.schedule(&partition, task, mode).await {
            Ok(outcome) => outcome,
            Err(error @ StorageError::ReplicationTimeout { .. }) => {
                // The task is on the master, only its replicas did not confirm it in time:
                // its owner must hear of it as of any other, or it would fire only at the
                // owner's next look (up to `idle_pull_period` late).
                self.announce(&partition, due_ms, now, &ScheduleOutcome::Created)
                    .await;
                return Err(error.into());
            }
            Err(error) => return Err(error.into()),
        };
        crate::admin::record_scheduled(&partition.queue, &outcome);
        self.announce(&partition, due_ms, now, &outcome).await;
        Ok(scheduled(&partition, &id, due_ms, outcome))
    }

    /// Validates one request and places it: its partition (the queue registered first), its
    /// due on the cluster clock, and its trace context (the request's, else the current
    /// span's).
    pub(crate) async fn prepare(
        &self,
        queue: &str,
        request: ScheduleRequest,
    ) -> EngineResult<PreparedTask> {
        let ScheduleRequest {
            id,
            when,
            payload,
            mode,
            traceparent,
        } = request;
        let traceparent = traceparent.or_else(crate::trace::current_traceparent);
        let queue = QueueName::new(queue)?;
        let id = TaskId::new(id)?;
        let layout = self.layout_for_write(&queue).await?;
        let now = self.now_ms();
        let due_ms = validate_due(when.due_ms(now))?;
        let partition = Partition::new(queue, layout.partition_of(&id));
        Ok(PreparedTask {
            partition,
            task: NewTask {
                id,
                due_ms,
                payload,
                traceparent,
            },
            mode,
            now,
        })
    }

    /// Schedules many tasks of one queue in pipelined batches, each in its request's mode.
    /// Returns one result per request, in order: a bad item fails alone, the others are
    /// stored. Requests are applied in order: consecutive requests of one mode go to the
    /// store together, and a change of mode starts the next store call (so a batch in one
    /// mode costs the same as before modes existed).
    pub async fn schedule_many(
        &self,
        queue: &str,
        requests: Vec<ScheduleRequest>,
    ) -> EngineResult<Vec<EngineResult<Scheduled>>> {
        let queue = QueueName::new(queue)?;
        let layout = self.layout_for_write(&queue).await?;
        let now = self.now_ms();
        let mut results: Vec<Option<EngineResult<Scheduled>>> = Vec::with_capacity(requests.len());
        // Looked up once for the whole call.
        let current = crate::trace::current_traceparent();
        let mut items = Vec::with_capacity(requests.len());
        let mut positions = Vec::with_capacity(requests.len());
        for (position, request) in requests.into_iter().enumerate() {
            let id = match TaskId::new(&request.id) {
                Ok(id) => id,
                Err(error) => {
                    results.push(Some(Err(error.into())));
                    continue;
                }
            };
            let partition = Partition::new(queue.clone(), layout.partition_of(&id));
            let due_ms = request.when.due_ms(now);
            results.push(None);
            positions.push(position);
            items.push((
                request.mode,
                (
                    partition,
                    NewTask {
                        id,
                        due_ms,
                        payload: request.payload,
                        traceparent: request.traceparent.or_else(|| current.clone()),
                    },
                ),
            ));
        }
        let keys: Vec<(Partition, TaskId, u64)> = items
            .iter()
            .map(|(_, (partition, task))| (partition.clone(), task.id.clone(), task.due_ms))
            .collect();
        let mut outcomes = Vec::with_capacity(items.len());
        let mut items = items.into_iter().peekable();
        while let Some((mode, first)) = items.next() {
            let mut run = vec![first];
            while let Some((_, item)) = items.next_if(|(next, _)| *next == mode) {
                run.push(item);
            }
            let count = run.len();
            let mut got = self.runtime.store.schedule_many(run, mode).await?;
            // Keeps the outcomes aligned with the items should a store answer too few.
            got.resize_with(count, || {
                Err(StorageError::Backend {
                    operation: "schedule_many",
                    message: "the store returned no outcome for this item".to_owned(),
                })
            });
            outcomes.extend(got);
        }
        // One wake-up per partition, for its earliest new due.
        let mut earliest: BTreeMap<Partition, u64> = BTreeMap::new();
        for ((position, (partition, id, due_ms)), outcome) in
            positions.into_iter().zip(keys).zip(outcomes)
        {
            let result = match outcome {
                Ok(outcome) => {
                    crate::admin::record_scheduled(&partition.queue, &outcome);
                    if matches!(
                        outcome,
                        ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. }
                    ) {
                        let entry = earliest.entry(partition.clone()).or_insert(due_ms);
                        *entry = (*entry).min(due_ms);
                    }
                    Ok(scheduled(&partition, &id, due_ms, outcome))
                }
                Err(error) => {
                    if matches!(error, StorageError::ReplicationTimeout { .. }) {
                        // Stored on the master, unconfirmed by its replicas: announced all
                        // the same (see `schedule_with`).
                        let entry = earliest.entry(partition.clone()).or_insert(due_ms);
                        *entry = (*entry).min(due_ms);
                    }
                    Err(error.into())
                }
            };
            results[position] = Some(result);
        }
        for (partition, due_ms) in earliest {
            self.announce(&partition, due_ms, now, &ScheduleOutcome::Created)
                .await;
        }
        Ok(results
            .into_iter()
            .map(|result| {
                // Only if the store returned fewer outcomes than items: its fate is unknown,
                // and scheduling it again is safe (upsert).
                result.unwrap_or(Err(EngineError::Storage(StorageError::Backend {
                    operation: "schedule_many",
                    message: "the store returned no outcome for this item".to_owned(),
                })))
            })
            .collect())
    }

    /// Cancels the task (guarantee 7). [`Cancel::Cancelled`]: it was pending (or waiting for
    /// a retry, or dead) and will not fire. [`Cancel::InFlight`]: its handler is running and
    /// cannot be un-run; that attempt finishes, no retry follows it, and the task is gone
    /// once it ended. [`Cancel::NotFound`]: the id names no live task.
    pub async fn cancel(&self, queue: &str, id: &str) -> EngineResult<Cancel> {
        let queue = QueueName::new(queue)?;
        let id = TaskId::new(id)?;
        let Some(layout) = self.layout_for_read(&queue).await? else {
            return Ok(Cancel::NotFound);
        };
        let partition = Partition::new(queue, layout.partition_of(&id));
        Ok(self.runtime.store.cancel(&partition, &id).await?)
    }

    /// The task, if it is pending, in flight, dead, or done within the retention.
    pub async fn get(&self, queue: &str, id: &str) -> EngineResult<Option<TaskInfo>> {
        let queue = QueueName::new(queue)?;
        let id = TaskId::new(id)?;
        let Some(layout) = self.layout_for_read(&queue).await? else {
            return Ok(None);
        };
        let partition = Partition::new(queue, layout.partition_of(&id));
        Ok(self.runtime.store.get(&partition, &id).await?)
    }

    /// Counts per queue (every queue the store knows), summed over the partitions, from a
    /// read that started after this call. One read of every partition, at most 16
    /// partitions at once; reads of one scheduler run one at a time and concurrent callers
    /// share them (see [`Scheduler::stats_within`]).
    pub async fn stats(&self) -> EngineResult<BTreeMap<String, PartitionStats>> {
        self.stats_within(std::time::Duration::ZERO).await
    }

    /// Graceful shutdown: stop claiming, leave the cluster at once (so the others take the
    /// partitions over without waiting for the heartbeat to expire), wait for running
    /// handlers up to `shutdown_grace` (they settle through their lease tokens, which need no
    /// membership), then give the tasks still running back (their leases end now, so the new
    /// owners take them).
    ///
    /// Call it once; a second call while the first drains returns at once. A `Scheduler`
    /// dropped without `shutdown` keeps its node running in the background until the tokio
    /// runtime ends (then the others notice its heartbeat expire and take over).
    pub async fn shutdown(&self) -> EngineResult<()> {
        let runtime = &self.runtime;
        if runtime.stop.is_cancelled() {
            return Ok(());
        }
        runtime.stop.cancel();
        self.loops.close();
        self.loops.wait().await;
        runtime.partition_tasks.close();
        runtime.partition_tasks.wait().await;
        let left = runtime.coordinator.leave().await;
        runtime.executions.close();
        let grace = runtime.config.engine.shutdown_grace;
        if tokio::time::timeout(grace, runtime.executions.wait())
            .await
            .is_err()
        {
            self.release_running().await;
        }
        left?;
        tracing::info!(node = runtime.node_id(), "scheduler shut down");
        Ok(())
    }

    /// Simulates a crash (tests, the demo): everything stops at once, running handlers are
    /// aborted without settling, and the node stops heartbeating *without* leaving, so the
    /// others notice it only when its heartbeat expires and take its in-flight tasks back
    /// only when their leases run out.
    pub fn kill(&self) {
        let runtime = &self.runtime;
        runtime
            .killed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        runtime.stop.cancel();
        for (_, running) in runtime.running.lock().drain() {
            running.abort.abort();
        }
        runtime.coordinator.crash();
    }

    async fn release_running(&self) {
        let runtime = &self.runtime;
        // A handler that finished meanwhile is left to settle (ack or fail) by its execution.
        let running: Vec<RunningTask> = {
            let mut running = runtime.running.lock();
            let unfinished: Vec<u64> = running
                .iter()
                .filter(|(_, task)| !task.finished)
                .map(|(run, _)| *run)
                .collect();
            unfinished
                .into_iter()
                .filter_map(|run| running.remove(&run))
                .collect()
        };
        tracing::warn!(
            count = running.len(),
            "handlers still running after the shutdown grace; giving their tasks back"
        );
        let now = self.now_ms();
        let mut partitions = Vec::new();
        for task in running {
            // Out of `running`, its lease is not renewed any more (a renewal landing after
            // the release would push the lease out again).
            task.abort.abort();
            // Ending the lease now hands the task to whichever node requeues it next.
            if let Err(error) = runtime.store.renew(&task.token, now).await {
                tracing::warn!(%error, id = %task.token.id, "could not give the task back; its lease will expire");
            }
            if !partitions.contains(&task.token.partition) {
                partitions.push(task.token.partition.clone());
            }
        }
        for partition in partitions {
            if let Err(error) = runtime
                .store
                .requeue_expired(&partition, now + 1, 10_000)
                .await
            {
                tracing::warn!(%error, %partition, "could not requeue released tasks; their leases expired and others will");
            }
        }
    }

    /// After a schedule: make sure the owner of the partition knows in time. Our own
    /// partition goes into our timer (or, beyond the window, into its worker's plan);
    /// another owner gets a wake-up when the task is due before its next look could see it:
    /// within 2 × `pull_period`, or within 1.5 × `idle_pull_period` + `prefetch_window` (the
    /// latest an idle partition's next look can be planned, plus its window).
    pub(crate) async fn announce(
        &self,
        partition: &Partition,
        due_ms: u64,
        now: u64,
        outcome: &ScheduleOutcome,
    ) {
        if !matches!(
            outcome,
            ScheduleOutcome::Created | ScheduleOutcome::Replaced { .. }
        ) {
            return;
        }
        let runtime = &self.runtime;
        if runtime.is_member() && runtime.arm(partition, due_ms).await {
            return;
        }
        if !self.needs_wakeup(due_ms, now) {
            return;
        }
        // Published on the partition's channel, which its owner listens to (or, while
        // nobody does, sent to the owner by the membership).
        let wakeup = Wakeup {
            queue: partition.queue.as_str().to_owned(),
            partition: partition.index,
            due_ms,
        };
        if let Err(error) = runtime.coordinator.wake(wakeup).await {
            tracing::debug!(%error, %partition, "wake-up not sent; the owner's pull will see the task");
        }
    }

    /// Whether a task due at `due_ms`, scheduled at `now`, must be announced to its owner.
    /// The owner may be idle on the partition (looking only every `idle_pull_period`, never
    /// later than its next known due minus the window): a task due before its next look
    /// could find it must be announced. Beyond that the owner's look comes in time.
    pub(crate) fn needs_wakeup(&self, due_ms: u64, now: u64) -> bool {
        let engine = &self.runtime.config.engine;
        let announce_within = (2 * engine.pull_period)
            .max(engine.idle_pull_period.mul_f64(1.5) + engine.prefetch_window);
        due_ms <= now.saturating_add(announce_within.as_millis() as u64)
    }

    /// The partition count of a queue we write to (registering it first, see
    /// [`layout_for_write`](Scheduler::layout_for_write)).
    pub(crate) async fn partitions_for_write(&self, queue: &QueueName) -> EngineResult<u32> {
        Ok(self.layout_for_write(queue).await?.partitions)
    }

    /// The layout of a queue we write to: registered with this node's `partitions` and
    /// `flow_keys` the first time, checked against the record afterwards. A queue not
    /// configured here takes the record (another producer may have created it otherwise).
    pub(crate) async fn layout_for_write(&self, queue: &QueueName) -> EngineResult<QueueLayout> {
        if let Some(layout) = self.runtime.partition_counts.get(queue.as_str()) {
            return Ok(*layout);
        }
        let settings = self.runtime.config.queue(queue.as_str());
        let configured_here = self.runtime.config.queues.contains_key(queue.as_str());
        let layout = match self
            .runtime
            .store
            .register_layout(queue, settings.partitions, Some(settings.flow_keys))
            .await
        {
            Ok(layout) => layout,
            // A queue created by another producer with another layout is fine for a queue
            // that is not configured here: use the record.
            Err(StorageError::PartitionMismatch { recorded, .. }) if !configured_here => {
                self.runtime
                    .store
                    .register_layout(queue, recorded, None)
                    .await?
            }
            Err(StorageError::FlowKeysMismatch { .. }) if !configured_here => {
                self.runtime
                    .store
                    .register_layout(queue, settings.partitions, None)
                    .await?
            }
            Err(error) => return Err(error.into()),
        };
        self.runtime
            .partition_counts
            .insert(queue.as_str().to_owned(), layout);
        Ok(layout)
    }

    /// The partition count of a queue we read from, or `None` when the store does not know
    /// the queue.
    pub(crate) async fn partitions_for_read(&self, queue: &QueueName) -> EngineResult<Option<u32>> {
        Ok(self
            .layout_for_read(queue)
            .await?
            .map(|layout| layout.partitions))
    }

    /// The layout of a queue we read from, or `None` when the store does not know the queue.
    pub(crate) async fn layout_for_read(
        &self,
        queue: &QueueName,
    ) -> EngineResult<Option<QueueLayout>> {
        if let Some(layout) = self.runtime.partition_counts.get(queue.as_str()) {
            return Ok(Some(*layout));
        }
        let known = self.runtime.store.queue_layouts().await?;
        let layout = known
            .into_iter()
            .find(|(name, _)| name == queue)
            .map(|(_, layout)| layout);
        if let Some(layout) = layout {
            self.runtime
                .partition_counts
                .insert(queue.as_str().to_owned(), layout);
        }
        Ok(layout)
    }
}

/// A request ready for the store ([`Scheduler::prepare`]).
pub(crate) struct PreparedTask {
    /// Where the task goes.
    pub(crate) partition: Partition,
    /// The task, due on the cluster clock.
    pub(crate) task: NewTask,
    /// What to do with a live task of the same id.
    pub(crate) mode: ScheduleMode,
    /// The cluster clock when the request was placed.
    pub(crate) now: u64,
}

pub(crate) fn scheduled(
    partition: &Partition,
    id: &TaskId,
    due_ms: u64,
    outcome: ScheduleOutcome,
) -> Scheduled {
    let (due_ms, kept) = match outcome {
        ScheduleOutcome::Kept { due_ms } => (due_ms, true),
        _ => (due_ms, false),
    };
    Scheduled {
        queue: partition.queue.as_str().to_owned(),
        id: id.as_str().to_owned(),
        due_ms,
        replaced: outcome.replaced(),
        duplicate: outcome.duplicate(),
        kept,
    }
}
