//! Shared helpers of the engine's tests: fast configs, backends, a firing recorder, a store
//! that records claims, and polling with deadlines.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use delayq_engine::config::{BackoffConfig, Config, QueueConfig};
use delayq_engine::{MemoryBackend, Scheduler, SchedulerBuilder, Task};
use delayq_storage::{
    AckOutcome, Cancel, ClaimBatch, DeadTask, FailAction, FailOutcome, ItemResult, LeaseToken,
    LookReport, LookRequest, NewTask, Partition, PartitionStats, QueueName, RecurringStore,
    ScheduleMode, ScheduleOutcome, ShardLook, StorageResult, StoredSchedule, TaskId, TaskInfo,
    TaskStore, TickOutcome,
};
use delayq_testkit::{PostgresServer, RedisOptions, RedisServer};
use parking_lot::Mutex;

static PREFIX_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A config with short periods so tests run in seconds.
pub fn fast_config() -> Config {
    let mut config = Config::default();
    config.redis.key_prefix = format!(
        "test{}-{}",
        std::process::id(),
        PREFIX_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    config.node.name = "test-node".to_owned();
    config.node.heartbeat_period = Duration::from_millis(100);
    config.node.heartbeat_ttl = Duration::from_millis(600);
    config.node.start_timeout = Duration::from_secs(5);
    config.engine.pull_period = Duration::from_millis(250);
    config.engine.prefetch_window = Duration::from_secs(2);
    config.engine.lease = Duration::from_secs(2);
    // The lease must exceed three response timeouts (config rule).
    config.redis.response_timeout = Duration::from_millis(600);
    config.engine.shutdown_grace = Duration::from_secs(3);
    config.queue_defaults = QueueConfig {
        partitions: 16,
        concurrency: 128,
        max_attempts: 3,
        backoff: BackoffConfig {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(200),
        },
        timeout: Duration::from_secs(10),
        rate_limit: None,
        global_concurrency: None,
        ..QueueConfig::default()
    };
    config
}

/// Where the tests' nodes keep their tasks.
pub enum TestBackend {
    /// A private redis-server.
    Redis(RedisServer),
    /// The in-process twin.
    Memory(MemoryBackend),
    /// A private PostgreSQL server; each config's key prefix names its schema.
    Postgres(PostgresServer),
}

/// The PostgreSQL schema of a test config: its unique key prefix as an identifier.
pub fn schema_of(config: &Config) -> String {
    config.redis.key_prefix.replace('-', "_")
}

impl TestBackend {
    /// A fresh private redis-server (AOF on, so restarts keep acknowledged writes).
    pub fn redis() -> Self {
        TestBackend::Redis(RedisServer::start_with(RedisOptions {
            aof: true,
            ..Default::default()
        }))
    }

    /// A fresh private PostgreSQL server.
    pub fn postgres() -> Self {
        TestBackend::Postgres(PostgresServer::start())
    }

    /// A fresh in-process backend.
    pub fn memory() -> Self {
        TestBackend::Memory(MemoryBackend::new())
    }

    /// A fresh in-process backend whose store has these options (the memory store's
    /// `executed_retention` and `max_payload` are its own, not the nodes' config).
    pub fn memory_with(options: delayq_storage::StoreOptions) -> Self {
        TestBackend::Memory(MemoryBackend::with_options(options))
    }

    /// A recording store over this backend's store, with `options` for the Redis one
    /// (the memory one keeps the options it was made with).
    pub async fn recording_store(
        &self,
        config: &Config,
        options: delayq_storage::StoreOptions,
    ) -> Arc<RecordingStore> {
        match self {
            TestBackend::Redis(server) => {
                let redis =
                    delayq_storage::RedisStore::connect(delayq_storage::RedisStoreOptions {
                        key_prefix: config.redis.key_prefix.clone(),
                        store: options,
                        ..delayq_storage::RedisStoreOptions::standalone(server.url())
                    })
                    .await
                    .expect("store connects");
                RecordingStore::new(Arc::new(redis))
            }
            TestBackend::Memory(backend) => RecordingStore::new(Arc::new(backend.store.clone())),
            TestBackend::Postgres(server) => {
                let settings = delayq_postgres::PostgresConfig::new(server.url())
                    .with_schema(schema_of(config));
                let store =
                    delayq_storage::PostgresStore::connect(delayq_storage::PostgresStoreOptions {
                        postgres: settings,
                        store: options,
                    })
                    .await
                    .expect("store connects");
                RecordingStore::new(Arc::new(store))
            }
        }
    }

    /// A builder for a node on this backend.
    pub fn builder(&self, config: &Config) -> SchedulerBuilder {
        let mut config = config.clone();
        match self {
            TestBackend::Redis(server) => {
                config.redis.url = server.url();
                delayq_engine::Scheduler::builder(config)
            }
            TestBackend::Memory(backend) => {
                delayq_engine::Scheduler::builder(config).memory(backend.clone())
            }
            TestBackend::Postgres(server) => {
                config.backend = delayq_engine::config::Backend::Postgres;
                config.postgres.url = server.url();
                config.postgres.schema = schema_of(&config);
                // The lease must exceed three statement timeouts (config rule), as on Redis.
                config.postgres.statement_timeout = config.redis.response_timeout;
                delayq_engine::Scheduler::builder(config)
            }
        }
    }

    /// The PostgreSQL server, if this is the PostgreSQL backend.
    pub fn postgres_server(&mut self) -> Option<&mut PostgresServer> {
        match self {
            TestBackend::Postgres(server) => Some(server),
            _ => None,
        }
    }

    /// The redis-server, if this is the Redis backend.
    pub fn server(&mut self) -> Option<&mut RedisServer> {
        match self {
            TestBackend::Redis(server) => Some(server),
            TestBackend::Memory(_) | TestBackend::Postgres(_) => None,
        }
    }
}

/// One handler run as the recorder saw it.
#[derive(Clone, Debug)]
pub struct Firing {
    pub queue: String,
    pub id: String,
    pub due_ms: u64,
    pub fired_ms: u64,
    pub attempt: u32,
    pub generation: u64,
    pub node: String,
    pub payload: Vec<u8>,
}

/// Records every handler run.
#[derive(Clone, Default)]
pub struct Recorder {
    firings: Arc<Mutex<Vec<Firing>>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&self, task: &Task) {
        self.firings.lock().push(Firing {
            queue: task.queue.clone(),
            id: task.id.clone(),
            due_ms: task.due_ms,
            fired_ms: task.fired_ms,
            attempt: task.attempt,
            generation: task.generation,
            node: task.node.clone(),
            payload: task.payload.to_vec(),
        });
    }

    /// A handler that records and succeeds.
    pub fn handler(
        &self,
    ) -> impl Fn(Task) -> futures::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static
    {
        let recorder = self.clone();
        move |task: Task| {
            recorder.record(&task);
            futures::future::ready(Ok(()))
        }
    }

    pub fn firings(&self) -> Vec<Firing> {
        self.firings.lock().clone()
    }

    pub fn len(&self) -> usize {
        self.firings.lock().len()
    }

    /// How many times each id fired.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for firing in self.firings.lock().iter() {
            *counts.entry(firing.id.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Distinct ids fired.
    pub fn distinct(&self) -> usize {
        self.counts().len()
    }
}

/// Polls `condition` every 20 ms until it holds or `within` passes; panics with `what`.
pub async fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `members` nodes are members and `nodes` own all 16 partitions of the test
/// queue between them.
pub async fn wait_for_ownership(nodes: &[Scheduler], members: usize) {
    wait_until(Duration::from_secs(10), "partitions are spread", || {
        nodes[0].membership().members.len() == members
            && nodes
                .iter()
                .map(|n| n.owned_partitions().len())
                .sum::<usize>()
                == 16
    })
    .await;
}

/// A store that records every claim it hands out, keyed by `(queue, id, generation)`.
pub struct RecordingStore {
    inner: Arc<dyn TaskStore>,
    claims: Mutex<BTreeMap<(String, String, u64), Vec<u64>>>,
    requeued: AtomicU64,
    /// Lease renewals that succeeded.
    renewals: AtomicU64,
    /// How many of the next non-empty claims lose their reply: they run in Redis, then the
    /// caller sees a response timeout.
    lose_claim_replies: AtomicU64,
    lost_claims: AtomicU64,
    /// How long the next claim waits before it reaches Redis (a call that waited out an
    /// outage in the connection layer), once.
    next_claim_delay_ms: AtomicU64,
    /// Recurring compare-and-sets after a tick was created: every `swap_fault_every`-th one
    /// fails, before it is applied (a node dying between creating a tick and advancing its
    /// schedule) or, when `swap_fault_after` is set, after (its reply lost).
    swap_fault_every: AtomicU64,
    swap_fault_after: std::sync::atomic::AtomicBool,
    swaps: AtomicU64,
    swap_faults: AtomicU64,
    /// Looks (`TaskStore::look`) per partition so far.
    looks: Mutex<BTreeMap<String, u64>>,
    /// Every claim that returned, in order: its partition, its limit, the tasks it got.
    claim_limits: Mutex<Vec<ClaimCall>>,
}

/// One claim as the recording store saw it.
#[derive(Clone, Debug)]
pub struct ClaimCall {
    pub partition: String,
    pub limit: usize,
    pub got: usize,
}

impl RecordingStore {
    pub fn new(inner: Arc<dyn TaskStore>) -> Arc<Self> {
        Arc::new(RecordingStore {
            inner,
            claims: Mutex::new(BTreeMap::new()),
            requeued: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
            lose_claim_replies: AtomicU64::new(0),
            lost_claims: AtomicU64::new(0),
            next_claim_delay_ms: AtomicU64::new(0),
            swap_fault_every: AtomicU64::new(0),
            swap_fault_after: std::sync::atomic::AtomicBool::new(false),
            swaps: AtomicU64::new(0),
            swap_faults: AtomicU64::new(0),
            looks: Mutex::new(BTreeMap::new()),
            claim_limits: Mutex::new(Vec::new()),
        })
    }

    /// Notes the fencing numbers of the tasks of `batch`.
    fn record_claims(&self, partition: &Partition, batch: &ClaimBatch) {
        let mut claims = self.claims.lock();
        for task in &batch.tasks {
            claims
                .entry((
                    partition.queue.as_str().to_owned(),
                    task.id.as_str().to_owned(),
                    task.generation,
                ))
                .or_default()
                .push(task.token.claim);
        }
    }

    /// Makes every `every`-th recurring compare-and-set fail with a transient error after
    /// 1.2 s, before it is applied, or after it (`after`: the reply is lost).
    pub fn fail_recurring_swaps(&self, every: u64, after: bool) {
        self.swap_fault_after.store(after, Ordering::SeqCst);
        self.swap_fault_every.store(every, Ordering::SeqCst);
    }

    /// How many recurring compare-and-sets were made to fail.
    pub fn swap_faults(&self) -> u64 {
        self.swap_faults.load(Ordering::SeqCst)
    }

    /// Makes the next `count` claims that move tasks lose their reply (a response timeout
    /// after Redis committed the claim).
    pub fn lose_next_claim_replies(&self, count: u64) {
        self.lose_claim_replies.store(count, Ordering::SeqCst);
    }

    /// Makes the next claim reach the store only after `delay`, with the lease deadline
    /// its caller computed when it sent it.
    pub fn delay_next_claim(&self, delay: Duration) {
        self.next_claim_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Claims whose reply was dropped so far.
    pub fn lost_claims(&self) -> u64 {
        self.lost_claims.load(Ordering::SeqCst)
    }

    /// Claims per `(queue, id, generation)`: the fencing numbers handed out.
    pub fn claims(&self) -> BTreeMap<(String, String, u64), Vec<u64>> {
        self.claims.lock().clone()
    }

    /// How many times the owners looked at `partition` (`TaskStore::look`) so far.
    pub fn looks(&self, partition: &Partition) -> u64 {
        self.looks
            .lock()
            .get(&partition.to_string())
            .copied()
            .unwrap_or(0)
    }

    /// Looks at every partition so far.
    pub fn all_looks(&self) -> u64 {
        self.looks.lock().values().sum()
    }

    /// Every claim that returned so far, in order.
    pub fn claim_calls(&self) -> Vec<ClaimCall> {
        self.claim_limits.lock().clone()
    }

    /// Lease renewals that succeeded so far.
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Tasks put back after their lease expired.
    pub fn requeued(&self) -> u64 {
        self.requeued.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl RecurringStore for RecordingStore {
    async fn recurring_get(&self, name: &str) -> StorageResult<Option<StoredSchedule>> {
        self.inner.recurring_get(name).await
    }
    async fn recurring_list(&self) -> StorageResult<Vec<StoredSchedule>> {
        self.inner.recurring_list().await
    }
    async fn recurring_swap(
        &self,
        name: &str,
        expected: Option<&str>,
        new: Option<&str>,
        next_ms: Option<u64>,
    ) -> StorageResult<bool> {
        let every = self.swap_fault_every.load(Ordering::SeqCst);
        let fault = every > 0 && self.swaps.fetch_add(1, Ordering::SeqCst) % every == every - 1;
        if !fault {
            return self
                .inner
                .recurring_swap(name, expected, new, next_ms)
                .await;
        }
        self.swap_faults.fetch_add(1, Ordering::SeqCst);
        // Long enough for the tick just created to fire meanwhile: the step is repeated
        // after its tick ran, which is when a second creation would fire it twice.
        tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
        if self.swap_fault_after.load(Ordering::SeqCst) {
            self.inner
                .recurring_swap(name, expected, new, next_ms)
                .await?;
        }
        Err(delayq_storage::StorageError::ConnectionLost {
            operation: "recurring_swap",
            message: "injected by the test".to_owned(),
        })
    }
    async fn recurring_due(
        &self,
        shard: u32,
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<ShardLook> {
        self.inner.recurring_due(shard, until_ms, limit).await
    }
    async fn recurring_due_many(
        &self,
        shards: &[u32],
        until_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<ShardLook>> {
        self.inner.recurring_due_many(shards, until_ms, limit).await
    }
    async fn recurring_fired(&self, name: &str, tick_ms: u64, fired_ms: u64) -> StorageResult<()> {
        self.inner.recurring_fired(name, tick_ms, fired_ms).await
    }
    async fn create_tick(
        &self,
        partition: &Partition,
        task: NewTask,
    ) -> StorageResult<TickOutcome> {
        self.inner.create_tick(partition, task).await
    }
    async fn forget_ticks(&self, partition: &Partition, ids: &[TaskId]) -> StorageResult<()> {
        self.inner.forget_ticks(partition, ids).await
    }
}

#[async_trait]
impl TaskStore for RecordingStore {
    async fn set_paused(
        &self,
        queue: &QueueName,
        partitions: u32,
        paused: bool,
    ) -> StorageResult<()> {
        self.inner.set_paused(queue, partitions, paused).await
    }
    async fn paused_queues(&self) -> StorageResult<Vec<(QueueName, u64)>> {
        self.inner.paused_queues().await
    }
    async fn take_rate_tokens(
        &self,
        queue: &QueueName,
        window_start_ms: u64,
        period_ms: u64,
        limit: u64,
        wanted: u64,
    ) -> StorageResult<u64> {
        self.inner
            .take_rate_tokens(queue, window_start_ms, period_ms, limit, wanted)
            .await
    }
    async fn acquire_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        limit: u64,
        wanted: u64,
        lease_ms: u64,
    ) -> StorageResult<u64> {
        self.inner
            .acquire_global_slots(queue, node, limit, wanted, lease_ms)
            .await
    }
    async fn release_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        count: u64,
    ) -> StorageResult<()> {
        self.inner.release_global_slots(queue, node, count).await
    }
    async fn delete_queue(&self, queue: &QueueName, partitions: u32) -> StorageResult<u64> {
        self.inner.delete_queue(queue, partitions).await
    }
    async fn register_layout(
        &self,
        queue: &QueueName,
        partitions: u32,
        flow_keys: Option<bool>,
    ) -> StorageResult<delayq_storage::QueueLayout> {
        self.inner
            .register_layout(queue, partitions, flow_keys)
            .await
    }

    async fn queue_layouts(&self) -> StorageResult<Vec<(QueueName, delayq_storage::QueueLayout)>> {
        self.inner.queue_layouts().await
    }

    async fn set_flow_limits(
        &self,
        queue: &QueueName,
        limits: delayq_storage::FlowLimits,
    ) -> StorageResult<()> {
        self.inner.set_flow_limits(queue, limits).await
    }

    async fn held_keys(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<delayq_storage::HeldKey>> {
        self.inner.held_keys(partition, limit).await
    }
    async fn queues(&self) -> StorageResult<Vec<(QueueName, u32)>> {
        self.inner.queues().await
    }
    async fn schedule(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.inner.schedule(partition, task, mode).await
    }
    async fn schedule_many(
        &self,
        items: Vec<(Partition, NewTask)>,
        mode: ScheduleMode,
    ) -> StorageResult<Vec<ItemResult>> {
        self.inner.schedule_many(items, mode).await
    }
    async fn cancel(&self, partition: &Partition, id: &TaskId) -> StorageResult<Cancel> {
        self.inner.cancel(partition, id).await
    }
    async fn get(&self, partition: &Partition, id: &TaskId) -> StorageResult<Option<TaskInfo>> {
        self.inner.get(partition, id).await
    }
    async fn claim_due(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<ClaimBatch> {
        let delay = self.next_claim_delay_ms.swap(0, Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let batch = self
            .inner
            .claim_due(partition, now_ms, limit, lease_deadline_ms, owner)
            .await?;
        let lose = !batch.tasks.is_empty()
            && self
                .lose_claim_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if lose {
            self.lost_claims.fetch_add(1, Ordering::SeqCst);
            return Err(delayq_storage::StorageError::Timeout {
                operation: "claim_due",
                message: "reply dropped by the test".to_owned(),
            });
        }
        self.record_claims(partition, &batch);
        self.claim_limits.lock().push(ClaimCall {
            partition: partition.to_string(),
            limit,
            got: batch.tasks.len(),
        });
        Ok(batch)
    }
    async fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> StorageResult<ClaimBatch> {
        // The engine recovers only after a claim failed, so these were not recorded yet.
        let batch = self
            .inner
            .recover_claim(partition, owner, lease_deadline_ms)
            .await?;
        self.record_claims(partition, &batch);
        Ok(batch)
    }
    async fn peek_window(
        &self,
        partition: &Partition,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        self.inner
            .peek_window(partition, from_ms, to_ms, limit)
            .await
    }
    async fn pending_head(&self, partition: &Partition) -> StorageResult<Option<u64>> {
        self.inner.pending_head(partition).await
    }
    async fn ack(&self, token: &LeaseToken) -> StorageResult<AckOutcome> {
        self.inner.ack(token).await
    }
    async fn fail(
        &self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
    ) -> StorageResult<FailOutcome> {
        self.inner.fail(token, error, action).await
    }
    async fn renew(&self, token: &LeaseToken, lease_deadline_ms: u64) -> StorageResult<()> {
        self.inner.renew(token, lease_deadline_ms).await?;
        self.renewals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    async fn requeue_expired(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<TaskId>> {
        let requeued = self.inner.requeue_expired(partition, now_ms, limit).await?;
        self.requeued
            .fetch_add(requeued.len() as u64, Ordering::Relaxed);
        Ok(requeued)
    }
    async fn prune_done(
        &self,
        partition: &Partition,
        older_than_ms: u64,
        limit: usize,
    ) -> StorageResult<u64> {
        self.inner.prune_done(partition, older_than_ms, limit).await
    }
    async fn look(
        &self,
        partition: &Partition,
        request: &LookRequest,
    ) -> StorageResult<LookReport> {
        *self.looks.lock().entry(partition.to_string()).or_insert(0) += 1;
        let report = self.inner.look(partition, request).await?;
        self.requeued
            .fetch_add(report.requeued.len() as u64, Ordering::Relaxed);
        Ok(report)
    }
    async fn stats(&self, partition: &Partition, now_ms: u64) -> StorageResult<PartitionStats> {
        self.inner.stats(partition, now_ms).await
    }
    async fn list_dead(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<DeadTask>> {
        self.inner.list_dead(partition, limit).await
    }
    async fn peek_dead(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        self.inner.peek_dead(partition, limit).await
    }
    async fn retry_dead(
        &self,
        partition: &Partition,
        id: &TaskId,
        due_ms: u64,
    ) -> StorageResult<bool> {
        self.inner.retry_dead(partition, id, due_ms).await
    }
    async fn purge_dead(&self, partition: &Partition, id: Option<&TaskId>) -> StorageResult<u64> {
        self.inner.purge_dead(partition, id).await
    }
}

/// A [`RecordingStore`] over a fresh Redis store on `server`, under `config`'s key prefix
/// (give it to a node with `SchedulerBuilder::store`).
pub async fn recording_redis_store(server: &RedisServer, config: &Config) -> Arc<RecordingStore> {
    let redis = delayq_storage::RedisStore::connect(delayq_storage::RedisStoreOptions {
        key_prefix: config.redis.key_prefix.clone(),
        store: delayq_storage::StoreOptions::default(),
        ..delayq_storage::RedisStoreOptions::standalone(server.url())
    })
    .await
    .expect("store connects");
    RecordingStore::new(Arc::new(redis))
}
