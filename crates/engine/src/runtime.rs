//! The node's shared state and its long-running loops: the timer, wake-ups and ownership.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use delayq_coordinator::{owned_partitions, ClusterClock, Coordinator, Membership};
use delayq_storage::{
    FlowLimits, LeaseToken, Partition, QueueLayout, QueueName, StorageError, TaskStore,
};
use futures::future::AbortHandle;
use parking_lot::Mutex;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, QueueConfig};
use crate::handler::Handler;
use crate::health::StoreHealth;
use crate::partition::PartitionWorker;
use crate::timer::DueTimer;

/// A queue this node serves: its settings, handler and concurrency slots.
pub(crate) struct QueueRuntime {
    pub(crate) name: QueueName,
    pub(crate) partitions: u32,
    pub(crate) settings: QueueConfig,
    pub(crate) handler: Arc<dyn Handler>,
    /// Handlers running at once (`concurrency`): what claims wait for.
    pub(crate) slots: Arc<Semaphore>,
    /// Finished handlers whose result is still being recorded (ack, retry, dead letter), at
    /// most four times `concurrency`: a finished handler hands its slot to the next task as
    /// soon as it has a settling place, so claims are not held back by the ack's round trip,
    /// and what is held in memory stays bounded when Redis is slow.
    pub(crate) settling: Arc<Semaphore>,
    /// Turns to gather handler slots for a claim behind a backlog (`partition.rs`,
    /// `BUSY_GATHERERS` of them, `BUSY_GATHERING`): the backlogged partitions of this queue
    /// take turns, so the slots that come free go to a few claims of half of `concurrency`
    /// rather than a few slots each to every partition (each claim and ack costs a store
    /// call whatever it carries: on PostgreSQL a burst of 100,000 drained at ~7k/s in claims
    /// of ~3 tasks, ~28k/s in turns).
    pub(crate) busy_gathering: Semaphore,
    /// The cluster-wide limits (`rate_limit`, `global_concurrency`).
    pub(crate) limits: crate::limits::QueueLimits,
    /// The metrics each fire updates.
    pub(crate) metrics: crate::queue_metrics::QueueMetrics,
    /// The per-key limits (`per_key_*`), when any is set.
    pub(crate) flow_limits: Option<FlowLimits>,
    /// Whether the store's claims apply `flow_limits` (given once, before the first claim;
    /// false when the queue is registered without flow keys, see
    /// [`QueueRuntime::apply_flow_limits`]).
    pub(crate) flow_limits_applied: tokio::sync::OnceCell<bool>,
}

impl QueueRuntime {
    /// Gives the store this queue's per-key limits before its first claim, once. A queue
    /// whose limits come from `queue_defaults` but that another node registered without flow
    /// keys runs without them (warned once); any other failure is returned, and the claim
    /// waits and asks again (claiming without the limits would break them).
    pub(crate) async fn apply_flow_limits(&self, runtime: &Runtime) -> Result<(), StorageError> {
        let Some(limits) = self.flow_limits else {
            return Ok(());
        };
        self.flow_limits_applied
            .get_or_try_init(|| async {
                match runtime.store.set_flow_limits(&self.name, limits).await {
                    Ok(()) => Ok(true),
                    Err(StorageError::FlowKeysRequired { .. })
                        if !runtime.config.queues.contains_key(self.name.as_str()) =>
                    {
                        tracing::warn!(queue = %self.name, "per-key limits of queue_defaults not applied: the queue is registered without flow_keys");
                        Ok(false)
                    }
                    Err(error) => Err(error),
                }
            })
            .await
            .map(|_| ())
    }
}

/// What partition ownership is computed from: when none of it changed, neither did the
/// partitions this node serves.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OwnershipInputs {
    epoch: u64,
    members: Vec<String>,
    served: BTreeMap<QueueName, u32>,
    stopping: bool,
}

/// A handler execution that has not settled yet.
pub(crate) struct RunningTask {
    pub(crate) token: LeaseToken,
    /// Aborts the handler.
    pub(crate) abort: AbortHandle,
    /// Set once the handler returned (or was stopped). Its claim's driver renews the lease
    /// only while the entry is here: removing it ends the renewals.
    pub(crate) finished: bool,
}

/// Everything a node's loops share.
pub(crate) struct Runtime {
    pub(crate) config: Config,
    pub(crate) store: Arc<dyn TaskStore>,
    /// The store again, as itself, on the PostgreSQL backend: what `schedule_in_tx` writes
    /// through.
    pub(crate) postgres: Option<delayq_storage::PostgresStore>,
    pub(crate) coordinator: Arc<dyn Coordinator>,
    pub(crate) clock: Arc<ClusterClock>,
    pub(crate) timer: DueTimer,
    pub(crate) health: StoreHealth,
    /// Handlers by queue name.
    pub(crate) handlers: HashMap<String, Arc<dyn Handler>>,
    /// The handler of every other queue (`delayq node` serves all queues).
    pub(crate) default_handler: Option<Arc<dyn Handler>>,
    /// The queues served here, created as they are discovered.
    pub(crate) queues: DashMap<String, Arc<QueueRuntime>>,
    /// Known queue layouts: partition counts and flow keys (producer side cache of the
    /// store's registry).
    pub(crate) partition_counts: DashMap<String, QueueLayout>,
    /// The partitions this node owns now.
    pub(crate) workers: Mutex<HashMap<Partition, Arc<PartitionWorker>>>,
    /// Handlers running at once on this node over all its queues (`node.max_running`): what
    /// claims wait for after their queue's slots.
    pub(crate) running_slots: Arc<Semaphore>,
    /// Handler executions not settled yet, by run number.
    pub(crate) running: Mutex<HashMap<u64, RunningTask>>,
    pub(crate) next_run: AtomicU64,
    /// Handler executions (waited for on shutdown).
    pub(crate) executions: TaskTracker,
    /// The partition workers' tasks (waited for on shutdown, before the executions).
    pub(crate) partition_tasks: TaskTracker,
    /// Serializes [`Runtime::rebalance`], and holds what its last run computed ownership
    /// from (nothing to do when that did not change).
    pub(crate) rebalancing: tokio::sync::Mutex<Option<OwnershipInputs>>,
    /// Set by a simulated crash: claimed tasks are not run any more.
    pub(crate) killed: std::sync::atomic::AtomicBool,
    /// Cancelled when the node stops claiming (shutdown or crash).
    /// Woken when this process changed a recurring schedule, so the driver looks at once.
    pub(crate) recurring_changed: tokio::sync::Notify,
    pub(crate) stop: CancellationToken,
}

impl Runtime {
    /// This node's id.
    pub(crate) fn node_id(&self) -> &str {
        self.coordinator.node_id().as_str()
    }

    /// Whether this node owns `partition` now.
    pub(crate) fn owns(&self, partition: &Partition) -> bool {
        self.workers.lock().contains_key(partition)
    }

    /// Nudges the worker of `partition` to claim now (if this node owns it).
    pub(crate) fn wake_partition(&self, partition: &Partition) {
        let worker = self.workers.lock().get(partition).cloned();
        if let Some(worker) = worker {
            worker.wake();
        }
    }

    /// Puts `(due_ms, partition)` into the timer when this node owns the partition, or should:
    /// a partition of a queue this node has not seen yet (a producer just created it) is
    /// adopted at once instead of at the next catalog refresh.
    pub(crate) async fn arm(self: &Arc<Self>, partition: &Partition, due_ms: u64) -> bool {
        if !self.owns(partition) {
            let membership = self.coordinator.membership().borrow().clone();
            let me = self.coordinator.node_id();
            let mine = delayq_coordinator::owner(
                partition.queue.as_str(),
                partition.index,
                &membership.members,
            ) == Some(me);
            if !mine || self.stop.is_cancelled() {
                return false;
            }
            self.rebalance().await;
        }
        self.arm_if_owned(partition, due_ms)
    }

    /// Puts `(due_ms, partition)` into the timer if this node owns the partition and the due
    /// time is within the prefetch window; returns whether it owns the partition. Beyond the
    /// window a pull arms it in time, and holding it now only fills the timer (a million
    /// tasks scheduled an hour ahead must not cost a million entries).
    ///
    /// A due beyond the window is passed to the partition's worker instead
    /// ([`PartitionWorker::expect`]): an idle partition then looks again once the task is
    /// within the window, not only after `idle_pull_period`.
    pub(crate) fn arm_if_owned(&self, partition: &Partition, due_ms: u64) -> bool {
        let Some(worker) = self.workers.lock().get(partition).cloned() else {
            return false;
        };
        let window = self.config.engine.prefetch_window.as_millis() as u64;
        let horizon = self.clock.now_ms().saturating_add(window);
        if due_ms <= horizon {
            self.timer.insert(due_ms, partition.clone());
        } else {
            worker.expect(due_ms - window);
        }
        true
    }

    /// After a keyed task of `partition` ended: when this node owns the partition and its
    /// latest claim left tasks held back by their flow keys, the partition claims again now
    /// (the end may have let one of them back into the pending index). Without held-back
    /// tasks nothing is done: the claims go on as the partition's timer says.
    pub(crate) fn claim_again_if_held_back(&self, partition: &Partition) {
        let Some(worker) = self.workers.lock().get(partition).cloned() else {
            return;
        };
        if worker.holds_back.load(std::sync::atomic::Ordering::Relaxed) {
            self.timer.insert(self.clock.now_ms(), partition.clone());
        }
    }

    /// Whether a member of the cluster runs handlers (and so owns partitions).
    pub(crate) fn is_member(&self) -> bool {
        self.default_handler.is_some() || !self.handlers.is_empty()
    }

    /// The queue runtime of `name`, created on first use when this node serves it.
    pub(crate) fn queue_runtime(
        &self,
        name: &QueueName,
        partitions: u32,
    ) -> Option<Arc<QueueRuntime>> {
        if let Some(queue) = self.queues.get(name.as_str()) {
            return Some(queue.clone());
        }
        let handler = self
            .handlers
            .get(name.as_str())
            .or(self.default_handler.as_ref())?
            .clone();
        let settings = self.config.queue(name.as_str());
        let queue = Arc::new(QueueRuntime {
            name: name.clone(),
            partitions,
            slots: Arc::new(Semaphore::new(settings.concurrency)),
            settling: Arc::new(Semaphore::new(settings.concurrency.saturating_mul(4))),
            busy_gathering: Semaphore::new(crate::partition::BUSY_GATHERERS),
            limits: crate::limits::QueueLimits::of(&settings),
            metrics: crate::queue_metrics::QueueMetrics::of(name),
            flow_limits: Some(settings.flow_limits()).filter(|limits| !limits.is_unlimited()),
            flow_limits_applied: tokio::sync::OnceCell::new(),
            settings,
            handler,
        });
        Some(
            self.queues
                .entry(name.as_str().to_owned())
                .or_insert(queue)
                .clone(),
        )
    }

    /// The queues this node serves, with their partition counts: the queues with a handler
    /// of their own, plus (with a default handler) every queue the store's registry lists.
    ///
    /// A queue that left the registry (`delete_queue`, here or on another node) is forgotten
    /// here: its partition count and queue runtime are dropped, so the caller stops its
    /// workers and a later schedule registers it again. A queue with a handler of its own is
    /// served whatever the registry says (this node was built to run it) but not registered
    /// again until something schedules into it. When the registry cannot be read, everything
    /// served so far stays served.
    async fn served_queues(&self) -> BTreeMap<QueueName, u32> {
        let mut served = BTreeMap::new();
        for queue in self.queues.iter() {
            if self.handlers.contains_key(queue.key()) {
                served.insert(queue.name.clone(), queue.partitions);
            }
        }
        if self.default_handler.is_none() {
            return served;
        }
        match self.store.queue_layouts().await {
            Ok(known) => {
                self.health.ok();
                let listed: HashSet<String> = known
                    .iter()
                    .map(|(queue, _)| queue.as_str().to_owned())
                    .collect();
                for (queue, layout) in known {
                    self.partition_counts
                        .insert(queue.as_str().to_owned(), layout);
                    served.entry(queue).or_insert(layout.partitions);
                }
                let gone: Vec<String> = self
                    .queues
                    .iter()
                    .map(|queue| queue.key().clone())
                    .chain(
                        self.partition_counts
                            .iter()
                            .map(|count| count.key().clone()),
                    )
                    .filter(|name| !listed.contains(name) && !self.handlers.contains_key(name))
                    .collect();
                for name in gone {
                    if self.queues.contains_key(&name) {
                        tracing::info!(queue = %name, "queue left the registry (deleted); no longer served");
                    }
                    self.forget_queue(&name);
                }
            }
            Err(error) => {
                self.health.failed("queues", &error);
                for queue in self.queues.iter() {
                    served.insert(queue.name.clone(), queue.partitions);
                }
            }
        }
        served
    }

    /// Forgets what this process cached about `queue` (a deleted queue): its partition
    /// count, and its queue runtime unless it has a handler of its own. The next rebalance
    /// stops its workers; the next schedule registers it again.
    pub(crate) fn forget_queue(&self, queue: &str) {
        self.partition_counts.remove(queue);
        if !self.handlers.contains_key(queue) {
            self.queues.remove(queue);
        }
    }

    /// Starts the workers of partitions this node gained and stops those it lost, for the
    /// latest membership. Serialized, and the membership is read under the lock, so an older
    /// view can never undo a newer one.
    pub(crate) async fn rebalance(self: &Arc<Self>) {
        let mut last_plan = self.rebalancing.lock().await;
        let served = self.served_queues().await;
        let membership = self.coordinator.membership().borrow().clone();
        let membership = &membership;
        let me = self.coordinator.node_id().clone();
        // Ownership is a function of the members and the queues served: when neither changed
        // since the last rebalance, neither did the partitions to serve, and recomputing them
        // (queues × partitions × members hashes) every period would be wasted work.
        let plan = OwnershipInputs {
            epoch: membership.epoch,
            members: membership
                .members
                .iter()
                .map(|member| member.id.as_str().to_owned())
                .collect(),
            served: served.clone(),
            stopping: self.stop.is_cancelled(),
        };
        if last_plan.as_ref() == Some(&plan) {
            return;
        }
        *last_plan = Some(plan);
        let mut desired = HashSet::new();
        if membership.contains(&me) && !self.stop.is_cancelled() {
            for (queue, partitions) in &served {
                for index in owned_partitions(&me, queue.as_str(), *partitions, &membership.members)
                {
                    desired.insert(Partition::new(queue.clone(), index));
                }
            }
        }
        let (mut gained, mut lost) = (0usize, 0usize);
        {
            let mut workers = self.workers.lock();
            workers.retain(|partition, worker| {
                let keep = desired.contains(partition);
                if !keep {
                    worker.stop();
                    lost += 1;
                }
                keep
            });
            for partition in desired.iter() {
                if workers.contains_key(partition) {
                    continue;
                }
                let Some(queue) = self.queue_runtime(&partition.queue, served[&partition.queue])
                else {
                    continue;
                };
                let worker = PartitionWorker::spawn(self.clone(), queue, partition.clone());
                workers.insert(partition.clone(), worker);
                gained += 1;
            }
        }
        // Wake-ups travel on per-partition channels: hear those of the partitions owned now.
        self.coordinator.listen(
            desired
                .iter()
                .map(|partition| (partition.queue.as_str().to_owned(), partition.index))
                .collect(),
        );
        if lost > 0 {
            self.timer.retain(|partition| desired.contains(partition));
        }
        if gained > 0 || lost > 0 {
            tracing::info!(
                epoch = membership.epoch,
                members = membership.members.len(),
                gained,
                lost,
                owned = desired.len(),
                "partition ownership changed"
            );
        }
    }
}

/// Sleeps until the earliest due time on the cluster clock, then wakes the due partitions.
pub(crate) async fn run_timer(runtime: Arc<Runtime>) {
    loop {
        let now = runtime.clock.now_ms();
        let sleep_for = match runtime.timer.next_due() {
            Some(due) if due <= now => {
                for partition in runtime.timer.pop_due(now) {
                    runtime.wake_partition(&partition);
                }
                continue;
            }
            // Wake at the start of the due millisecond on the cluster clock, not up to 1 ms
            // after it.
            Some(due) => {
                Duration::from_micros((due * 1_000).saturating_sub(runtime.clock.now_us()).max(1))
            }
            None => MAX_TIMER_SLEEP,
        };
        // A jump of the cluster clock (a new offset sample) is noticed within this.
        let sleep_for = sleep_for.min(MAX_TIMER_SLEEP);
        tokio::select! {
            biased;
            _ = runtime.stop.cancelled() => return,
            _ = runtime.timer.earlier_entry() => {}
            _ = tokio::time::sleep(sleep_for) => {}
        }
    }
}

/// The longest the timer sleeps before it looks at the clock again.
const MAX_TIMER_SLEEP: Duration = Duration::from_millis(250);

/// Feeds wake-ups from other nodes into the timer, once checked: a wake-up must name a queue
/// this node knows and a partition of it (`partition < partitions`); anything else is
/// dropped with a debug line. The coordinator's mailbox already rejected malformed payloads,
/// coalesced wake-ups per partition and bounded their number (see
/// [`delayq_coordinator::WakeupReceiver`]); a dropped wake-up is covered by the periodic pull.
///
/// A queue this node does not know yet may be new (a producer just created it): with a
/// default handler, the store's queue registry is re-read to find it, at most once per
/// `pull_period`, so a flood of wake-ups for unknown queues costs one read per period, not
/// one per wake-up (the periodic catalog refresh adopts a new queue anyway).
pub(crate) async fn run_wakeups(
    runtime: Arc<Runtime>,
    mut wakeups: delayq_coordinator::WakeupReceiver,
) {
    /// The partition count of `queue`, if this node knows the queue.
    fn known_partitions(runtime: &Runtime, queue: &str) -> Option<u32> {
        runtime
            .queues
            .get(queue)
            .map(|queue| queue.partitions)
            .or_else(|| {
                runtime
                    .partition_counts
                    .get(queue)
                    .map(|layout| layout.partitions)
            })
    }

    let mut last_registry_read: Option<tokio::time::Instant> = None;
    loop {
        let wakeup = tokio::select! {
            _ = runtime.stop.cancelled() => return,
            wakeup = wakeups.recv() => match wakeup {
                Some(wakeup) => wakeup,
                None => return,
            },
        };
        let Ok(queue) = QueueName::new(&wakeup.queue) else {
            tracing::debug!(queue = %wakeup.queue, "ignoring a wake-up for an invalid queue name");
            continue;
        };
        let mut partitions = known_partitions(&runtime, queue.as_str());
        let may_read_registry =
            last_registry_read.is_none_or(|at| at.elapsed() >= runtime.config.engine.pull_period);
        if partitions.is_none() && runtime.default_handler.is_some() && may_read_registry {
            last_registry_read = Some(tokio::time::Instant::now());
            match runtime.store.queue_layouts().await {
                Ok(known) => {
                    for (name, layout) in known {
                        runtime
                            .partition_counts
                            .insert(name.as_str().to_owned(), layout);
                    }
                    partitions = known_partitions(&runtime, queue.as_str());
                }
                Err(error) => tracing::debug!(%error, "queue registry not read for a wake-up"),
            }
        }
        let Some(partitions) = partitions else {
            tracing::debug!(queue = %queue, partition = wakeup.partition, "ignoring a wake-up for a queue this node does not know");
            continue;
        };
        if wakeup.partition >= partitions {
            tracing::debug!(queue = %queue, partition = wakeup.partition, partitions, "ignoring a wake-up for a partition out of range");
            continue;
        }
        let partition = Partition::new(queue, wakeup.partition);
        runtime.arm(&partition, wakeup.due_ms).await;
    }
}

/// Follows the membership (and, every `pull_period`, the store's queue catalog: new queues
/// are adopted and deleted ones dropped within one period) and rebalances.
pub(crate) async fn run_ownership(
    runtime: Arc<Runtime>,
    mut membership: watch::Receiver<Membership>,
) {
    let mut catalog = tokio::time::interval(
        runtime
            .config
            .engine
            .pull_period
            .max(Duration::from_millis(100)),
    );
    catalog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        membership.borrow_and_update();
        runtime.rebalance().await;
        tokio::select! {
            biased;
            _ = runtime.stop.cancelled() => break,
            changed = membership.changed() => if changed.is_err() { break },
            _ = catalog.tick() => {}
        }
    }
    for (_, worker) in runtime.workers.lock().drain() {
        worker.stop();
    }
}

/// A run number for [`Runtime::running`].
pub(crate) fn next_run_number(runtime: &Runtime) -> u64 {
    runtime.next_run.fetch_add(1, Ordering::Relaxed)
}
