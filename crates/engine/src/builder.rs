//! [`SchedulerBuilder`]: handlers, backend and clock, then `start`: connect, register the
//! queues, join the cluster, start the runtime's loops.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use dashmap::DashMap;
use delayq_coordinator::{
    Coordinator, CoordinatorConfig, LocalClock, MemoryCluster, MemoryCoordinator,
    PostgresCoordinator, QueueFilter, RedisCoordinator, SystemClock,
};
use delayq_postgres::{Database, Migrator};
use delayq_storage::{
    MemoryStore, PostgresStore, QueueName, RedisStore, RedisStoreOptions, StoreOptions, TaskStore,
    WaitReplicas,
};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::error::{EngineError, EngineResult};
use crate::handler::Handler;
use crate::health::StoreHealth;
use crate::runtime::{run_ownership, run_timer, run_wakeups, Runtime};
use crate::scheduler::Scheduler;
use crate::timer::DueTimer;

/// An in-process backend: a shared memory store and cluster hub. Clone it into several
/// schedulers to run a cluster in one process (the demo, users' tests).
#[derive(Clone)]
pub struct MemoryBackend {
    /// The shared task store.
    pub store: MemoryStore,
    /// The shared membership hub.
    pub cluster: Arc<MemoryCluster>,
}

impl MemoryBackend {
    /// A fresh, empty in-process backend.
    ///
    /// The store takes the default limits (1 MiB payloads, 1 h executed retention): the
    /// store is shared by every node built on it, so the nodes' `engine.max_payload` and
    /// `engine.executed_retention` do not apply to it; use [`MemoryBackend::with_options`].
    pub fn new() -> Self {
        Self::with_options(StoreOptions::default())
    }

    /// A fresh, empty in-process backend whose store has these limits.
    pub fn with_options(options: StoreOptions) -> Self {
        MemoryBackend {
            store: MemoryStore::new(options),
            cluster: MemoryCluster::new(),
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the builder's store and coordinator come from.
enum Backend {
    /// The configuration's `backend:` (Redis or PostgreSQL).
    Configured,
    /// An in-process backend shared by the schedulers built on it.
    Memory(MemoryBackend),
}

/// Builds a [`Scheduler`]: handlers, backend, clock. See [`Scheduler::builder`].
pub struct SchedulerBuilder {
    config: Config,
    handlers: HashMap<String, Arc<dyn Handler>>,
    default_handler: Option<Arc<dyn Handler>>,
    backend: Backend,
    local_clock: Arc<dyn LocalClock>,
    store: Option<Arc<dyn TaskStore>>,
    migrate: bool,
    problem: Option<EngineError>,
}

impl SchedulerBuilder {
    /// A builder for `config` on its configured backend, with no handler yet.
    pub(crate) fn new(config: Config) -> Self {
        SchedulerBuilder {
            config,
            handlers: HashMap::new(),
            default_handler: None,
            backend: Backend::Configured,
            local_clock: Arc::new(SystemClock),
            store: None,
            migrate: true,
            problem: None,
        }
    }

    /// Runs `handler` for the tasks of `queue`. A node with at least one handler joins the
    /// cluster and owns a share of the partitions of the queues it has handlers for.
    pub fn handler(mut self, queue: &str, handler: impl Handler) -> Self {
        if let Err(error) = QueueName::new(queue) {
            self.problem.get_or_insert(error.into());
        } else if self
            .handlers
            .insert(queue.to_owned(), Arc::new(handler))
            .is_some()
        {
            self.problem.get_or_insert(EngineError::DuplicateHandler {
                queue: queue.to_owned(),
            });
        }
        self
    }

    /// Runs `handler` for every queue without its own handler, including queues that
    /// producers create later (what `delayq node` does).
    pub fn default_handler(mut self, handler: impl Handler) -> Self {
        self.default_handler = Some(Arc::new(handler));
        self
    }

    /// Uses the in-process backend instead of the configured one (Redis or PostgreSQL).
    pub fn memory(mut self, backend: MemoryBackend) -> Self {
        self.backend = Backend::Memory(backend);
        self
    }

    /// Uses this local clock instead of the system clock (tests: a machine whose clock is
    /// wrong).
    pub fn local_clock(mut self, clock: Arc<dyn LocalClock>) -> Self {
        self.local_clock = clock;
        self
    }

    /// Whether `start` creates or migrates delayq's PostgreSQL schema (the default), under
    /// the migration lock. With `false` (read-only commands) it only checks the schema, and
    /// `start` fails with an error saying what is pending when the schema is missing or
    /// behind this release (run `delayq migrate`); migrations of a newer release are fine.
    /// No effect on the other backends.
    pub fn migrate_schema(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Uses this task store instead of the backend's (tests: a store that records claims).
    pub fn store(mut self, store: Arc<dyn TaskStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Connects, registers the queues, joins the cluster (when there are handlers) and starts
    /// the runtime.
    pub async fn start(self) -> EngineResult<Scheduler> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        self.config.validate()?;
        let config = self.config;
        let member = self.default_handler.is_some() || !self.handlers.is_empty();
        let filter = if self.default_handler.is_some() {
            QueueFilter::All
        } else {
            let mut queues: Vec<String> = self.handlers.keys().cloned().collect();
            queues.sort();
            QueueFilter::Only(queues)
        };
        let coordinator_config = CoordinatorConfig {
            key_prefix: config.redis.key_prefix.clone(),
            node_name: config.node.name.clone(),
            heartbeat_period: config.node.heartbeat_period,
            heartbeat_ttl: config.node.heartbeat_ttl,
            start_timeout: config.node.start_timeout,
            queues: filter,
        };
        let store_options = StoreOptions {
            max_payload: config.engine.max_payload,
            executed_retention_ms: config.engine.executed_retention.as_millis() as u64,
            ..StoreOptions::default()
        };
        let mut postgres = None;
        let (store, coordinator): (Arc<dyn TaskStore>, Arc<dyn Coordinator>) = match self.backend {
            Backend::Configured if config.backend == crate::config::Backend::Postgres => {
                // One pool for the store and the coordinator; the schema is created or
                // migrated first, under the migration lock, so nodes starting together
                // migrate once and a node of the previous release keeps working beside it.
                let database = Database::new(&config.postgres_settings())?;
                let migrator = Migrator::new(&database);
                if self.migrate {
                    let report = migrator.apply().await?;
                    if !report.applied_now.is_empty() {
                        tracing::info!(
                            schema = database.schema().name(),
                            applied = ?report.applied_now,
                            "schema migrated"
                        );
                    }
                } else {
                    let status = migrator.status().await?;
                    if !status.initialized
                        || !status.pending.is_empty()
                        || !status.modified.is_empty()
                    {
                        return Err(delayq_postgres::Error::Database {
                            operation: "schema check",
                            class: delayq_postgres::ErrorClass::Permanent,
                            code: None,
                            message: status.to_string(),
                        }
                        .into());
                    }
                }
                let store: Arc<dyn TaskStore> = match self.store {
                    Some(store) => store,
                    None => {
                        let store = PostgresStore::on(database.clone(), store_options);
                        postgres = Some(store.clone());
                        Arc::new(store)
                    }
                };
                let clock = self.local_clock.clone();
                let coordinator: Arc<dyn Coordinator> = if member {
                    PostgresCoordinator::join(database, coordinator_config, clock).await?
                } else {
                    PostgresCoordinator::observe(database, coordinator_config, clock).await?
                };
                (store, coordinator)
            }
            Backend::Configured => {
                let store: Arc<dyn TaskStore> = match self.store {
                    Some(store) => store,
                    None => Arc::new(
                        RedisStore::connect(RedisStoreOptions {
                            redis: config.connect_options(),
                            key_prefix: config.redis.key_prefix.clone(),
                            store: store_options,
                            wait_replicas: config
                                .wait_for_replicas()
                                .map(|(replicas, timeout)| WaitReplicas { replicas, timeout }),
                        })
                        .await?,
                    ),
                };
                let redis = config.connect_options();
                let clock = self.local_clock.clone();
                let coordinator: Arc<dyn Coordinator> = if member {
                    RedisCoordinator::join(redis, coordinator_config, clock).await?
                } else {
                    RedisCoordinator::observe(redis, coordinator_config, clock).await?
                };
                (store, coordinator)
            }
            Backend::Memory(backend) => {
                let store: Arc<dyn TaskStore> = match self.store {
                    Some(store) => store,
                    None => Arc::new(backend.store.clone()),
                };
                let clock = self.local_clock.clone();
                let coordinator: Arc<dyn Coordinator> = if member {
                    MemoryCoordinator::join(&backend.cluster, coordinator_config, clock).await?
                } else {
                    MemoryCoordinator::observe(&backend.cluster, coordinator_config, clock).await?
                };
                (store, coordinator)
            }
        };
        let runtime = Arc::new(Runtime {
            timer: DueTimer::new(config.engine.max_prefetched),
            running_slots: Arc::new(tokio::sync::Semaphore::new(config.node.max_running)),
            clock: coordinator.clock(),
            config,
            store,
            postgres,
            coordinator,
            health: StoreHealth::new(),
            handlers: self.handlers,
            default_handler: self.default_handler,
            queues: DashMap::new(),
            partition_counts: DashMap::new(),
            workers: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            next_run: AtomicU64::new(0),
            executions: TaskTracker::new(),
            partition_tasks: TaskTracker::new(),
            rebalancing: tokio::sync::Mutex::new(None),
            killed: std::sync::atomic::AtomicBool::new(false),
            stop: CancellationToken::new(),
            recurring_changed: tokio::sync::Notify::new(),
        });
        let scheduler = Scheduler::new(runtime.clone());
        // Queues with their own handler are registered (and their partition count checked)
        // before the node takes any partition.
        let handler_queues: Vec<String> = runtime.handlers.keys().cloned().collect();
        for name in handler_queues {
            let queue = QueueName::new(&name)?;
            let partitions = scheduler.partitions_for_write(&queue).await?;
            if let Some(queue) = runtime.queue_runtime(&queue, partitions) {
                queue.apply_flow_limits(&runtime).await?;
            }
        }
        if runtime.default_handler.is_some() {
            let configured: Vec<String> = runtime.config.queues.keys().cloned().collect();
            for name in configured {
                let queue = QueueName::new(&name)?;
                let partitions = scheduler.partitions_for_write(&queue).await?;
                if let Some(queue) = runtime.queue_runtime(&queue, partitions) {
                    queue.apply_flow_limits(&runtime).await?;
                }
            }
        }
        if runtime.is_member() {
            // Before the driver starts, so that a node's first look sees what it declared.
            scheduler.declare_configured_recurring().await?;
            scheduler.loops().spawn(run_timer(runtime.clone()));
            scheduler
                .loops()
                .spawn(crate::gauges::run_node_gauges(runtime.clone()));
            if let Some(wakeups) = runtime.coordinator.take_wakeups() {
                scheduler
                    .loops()
                    .spawn(run_wakeups(runtime.clone(), wakeups));
            }
            let membership = runtime.coordinator.membership();
            scheduler
                .loops()
                .spawn(run_ownership(runtime.clone(), membership));
            let membership = runtime.coordinator.membership();
            scheduler
                .loops()
                .spawn(crate::recurring::run_driver(scheduler.clone(), membership));
        }
        tracing::info!(
            node = runtime.node_id(),
            member = runtime.is_member(),
            "scheduler started"
        );
        Ok(scheduler)
    }
}
