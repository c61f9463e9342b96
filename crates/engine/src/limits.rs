//! Cluster-wide limits of a queue (guarantee 11): `rate_limit` and `global_concurrency`.
//!
//! Both bounds are on the sum over every node, kept by Redis (or the memory store) with no
//! round trip per task while the queue is under its limit:
//!
//! - **Rate** ([`RateGate`]): fixed windows of the cluster clock, `floor(now / period)`. A node
//!   takes fire tokens of the current window from the store in chunks (a tenth of the limit,
//!   or what one claim wants if more) and spends them locally, one per claimed task; tokens a
//!   claim did not use go back to the node's bucket. The store grants at most `N` per window
//!   in all, so at most `N` tasks fire per period whatever the membership does; tokens left
//!   in a bucket when the window ends are dropped (the limit can be under-used by what the
//!   nodes held, never exceeded). A claim that finds the window used up waits for the next
//!   window: the held-back tasks stay pending, in due order, and fire later (the lateness
//!   metric shows the wait). Cost: one store call per chunk, about 10 per window under load.
//! - **Concurrency** ([`GlobalSlots`]): slots held per node under a lease in the store. A
//!   node asks for slots when a claim wants more than it holds free, keeps them while its
//!   handlers use them, renews its lease every heartbeat period and gives back the slots that
//!   stayed idle for [`IDLE_RELEASE`]. The store grants only while all holders together hold
//!   fewer than `N`, and drops a holder whose lease (two heartbeat TTLs) ran out, so a dead
//!   node's slots come back. A node stopped longer than its lease (SIGSTOP) can exceed the
//!   bound while its handlers finish, as with any lease. Cost: one store call per grant or
//!   release, none per task while the node holds free slots; a saturated queue asks at most
//!   once per [`DENIED_BACKOFF`] per node.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_storage::QueueName;
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{QueueConfig, RateLimit};
use crate::runtime::Runtime;

/// How long free global slots stay with a node before they are given back.
pub(crate) const IDLE_RELEASE: Duration = Duration::from_millis(200);
/// After the store granted no slot, how long a node waits before asking again.
pub(crate) const DENIED_BACKOFF: Duration = Duration::from_millis(25);

/// The cluster-wide limits of one queue, as this node applies them.
#[derive(Default)]
pub(crate) struct QueueLimits {
    pub(crate) rate: Option<RateGate>,
    pub(crate) global: Option<Arc<GlobalSlots>>,
}

impl QueueLimits {
    /// The limits a queue's settings ask for.
    pub(crate) fn of(settings: &QueueConfig) -> Self {
        QueueLimits {
            rate: settings.rate_limit.map(RateGate::new),
            global: settings
                .global_concurrency
                .map(|limit| Arc::new(GlobalSlots::new(limit))),
        }
    }
}

/// Tokens of one rate window that a claim took: given back when unused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateTokens {
    window: u64,
    pub(crate) count: u64,
}

/// The node's side of a queue's `rate_limit`.
pub(crate) struct RateGate {
    limit: RateLimit,
    /// `(window start ms, tokens left)`.
    bucket: Mutex<(u64, u64)>,
}

impl RateGate {
    fn new(limit: RateLimit) -> Self {
        RateGate {
            limit,
            bucket: Mutex::new((0, 0)),
        }
    }

    fn period_ms(&self) -> u64 {
        (self.limit.period.as_millis() as u64).max(1)
    }

    /// Takes up to `wanted` tokens of the current window; `Err(next window start)` when the
    /// window is used up cluster-wide.
    pub(crate) async fn take(
        &self,
        runtime: &Runtime,
        queue: &QueueName,
        wanted: u64,
    ) -> Result<RateTokens, u64> {
        let period = self.period_ms();
        let now = runtime.clock.now_ms();
        let window = now / period * period;
        let next_window = window + period;
        let have = {
            let mut bucket = self.bucket.lock();
            if bucket.0 != window {
                *bucket = (window, 0);
            }
            bucket.1
        };
        if have < wanted {
            let chunk = (wanted - have).max(self.limit.count.div_ceil(10));
            match runtime
                .store
                .take_rate_tokens(queue, window, period, self.limit.count, chunk)
                .await
            {
                Ok(granted) => {
                    let mut bucket = self.bucket.lock();
                    if bucket.0 == window {
                        bucket.1 += granted;
                    }
                }
                Err(error) => {
                    runtime.health.failed("take_rate_tokens", &error);
                    return Err(now + 100);
                }
            }
        }
        let mut bucket = self.bucket.lock();
        if bucket.0 != window || bucket.1 == 0 {
            return Err(next_window);
        }
        let count = bucket.1.min(wanted);
        bucket.1 -= count;
        Ok(RateTokens { window, count })
    }

    /// Gives back `unused` tokens of a claim (they stay good for their window only).
    pub(crate) fn give_back(&self, tokens: RateTokens, unused: u64) {
        let mut bucket = self.bucket.lock();
        if bucket.0 == tokens.window {
            bucket.1 += unused.min(tokens.count);
        }
    }
}

/// The node's side of a queue's `global_concurrency`.
pub(crate) struct GlobalSlots {
    limit: u32,
    /// Slots granted to this node, free or in use; a handler holds one while it runs.
    local: Arc<Semaphore>,
    /// Slots this node holds in the store (granted, not given back).
    held: AtomicU64,
    /// The cluster clock ms until which the store is not asked again (it granted nothing).
    denied_until: AtomicU64,
    /// When a claim last wanted slots (cluster clock ms).
    last_demand: AtomicU64,
    /// Whether the renew-and-release loop runs.
    started: AtomicBool,
    /// One grant or release at a time.
    talking: tokio::sync::Mutex<()>,
}

impl GlobalSlots {
    fn new(limit: u32) -> Self {
        GlobalSlots {
            limit,
            local: Arc::new(Semaphore::new(0)),
            held: AtomicU64::new(0),
            denied_until: AtomicU64::new(0),
            last_demand: AtomicU64::new(0),
            started: AtomicBool::new(false),
            talking: tokio::sync::Mutex::new(()),
        }
    }

    fn lease_ms(runtime: &Runtime) -> u64 {
        (runtime.config.node.heartbeat_ttl.as_millis() as u64 * 2).max(1_000)
    }

    /// Up to `wanted` slots for a claim (at least one), or `Err(retry at)` when the cluster
    /// has none free now.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        queue: &QueueName,
        wanted: usize,
    ) -> Result<OwnedSemaphorePermit, u64> {
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().maintain(runtime.clone(), queue.clone()));
        }
        let now = runtime.clock.now_ms();
        self.last_demand.store(now, Ordering::Relaxed);
        let free = self.local.available_permits();
        if free < wanted && now >= self.denied_until.load(Ordering::Relaxed) {
            let _talking = self.talking.lock().await;
            let free = self.local.available_permits();
            if free < wanted {
                let ask = (wanted - free) as u64;
                match runtime
                    .store
                    .acquire_global_slots(
                        queue,
                        runtime.node_id(),
                        u64::from(self.limit),
                        ask,
                        Self::lease_ms(runtime),
                    )
                    .await
                {
                    Ok(0) => {
                        let retry = now + DENIED_BACKOFF.as_millis() as u64;
                        self.denied_until.store(retry, Ordering::Relaxed);
                    }
                    Ok(granted) => {
                        self.held.fetch_add(granted, Ordering::SeqCst);
                        self.local.add_permits(granted as usize);
                    }
                    Err(error) => {
                        runtime.health.failed("acquire_global_slots", &error);
                        let retry = now + 100;
                        self.denied_until.store(retry, Ordering::Relaxed);
                    }
                }
            }
        }
        let free = self.local.available_permits().min(wanted);
        if free == 0 {
            return Err(self
                .denied_until
                .load(Ordering::Relaxed)
                .max(now + DENIED_BACKOFF.as_millis() as u64));
        }
        match self.local.clone().try_acquire_many_owned(free as u32) {
            Ok(permits) => Ok(permits),
            Err(_) => Err(now + DENIED_BACKOFF.as_millis() as u64),
        }
    }

    /// Renews the node's lease every heartbeat period and gives back slots that stayed free
    /// for [`IDLE_RELEASE`]; on shutdown gives back every free slot.
    async fn maintain(self: Arc<Self>, runtime: Arc<Runtime>, queue: QueueName) {
        let mut ticks =
            tokio::time::interval(IDLE_RELEASE.min(runtime.config.node.heartbeat_period));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_renew = 0;
        loop {
            let stopping = tokio::select! {
                _ = runtime.stop.cancelled() => true,
                _ = ticks.tick() => false,
            };
            let now = runtime.clock.now_ms();
            let idle = now.saturating_sub(self.last_demand.load(Ordering::Relaxed))
                >= IDLE_RELEASE.as_millis() as u64;
            let free = self.local.available_permits();
            if free > 0 && (idle || stopping) {
                let _talking = self.talking.lock().await;
                let free = self.local.available_permits();
                if let Ok(permits) = self.local.clone().try_acquire_many_owned(free as u32) {
                    permits.forget();
                    self.held.fetch_sub(free as u64, Ordering::SeqCst);
                    if let Err(error) = runtime
                        .store
                        .release_global_slots(&queue, runtime.node_id(), free as u64)
                        .await
                    {
                        // Its lease runs out instead, and the slots come back then.
                        tracing::debug!(%queue, %error, "global slots not given back");
                    }
                }
            }
            if stopping {
                return;
            }
            let renew_every = runtime.config.node.heartbeat_period.as_millis() as u64;
            if self.held.load(Ordering::SeqCst) > 0 && now >= last_renew + renew_every {
                last_renew = now;
                let renewed = runtime
                    .store
                    .acquire_global_slots(
                        &queue,
                        runtime.node_id(),
                        u64::from(self.limit),
                        0,
                        Self::lease_ms(&runtime),
                    )
                    .await;
                if let Err(error) = renewed {
                    tracing::debug!(%queue, %error, "global slot lease not renewed");
                }
            }
        }
    }
}
