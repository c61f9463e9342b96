//! The PostgreSQL coordinator, on the delayq-postgres layer: membership, heartbeats, the
//! cluster clock and wake-ups on the database a team already runs.
//!
//! # Tables, functions and channels
//! Migration 4 (`crates/postgres/migrations/0004_membership.sql`) in `postgres.schema`:
//! `cluster` (one row: the epoch and the stall marker), `nodes` (one row per registered
//! node, with its heartbeat deadline on the database clock, indexed), and the functions
//! `heartbeat`, `leave` and `snapshot`, so that each membership operation is one statement.
//! Membership announcements (the new epoch) are NOTIFYs on `<schema>_events`; wake-ups on
//! `<schema>_wake` ([`PostgresCoordinator::wake_channel`]), payload `queue\npartition\ndue_ms`.
//! NOTIFY is transactional: a wake-up sent in the transaction that scheduled the task (what
//! `schedule_in_tx` does) reaches the owner at commit and never for a rollback.
//!
//! # How membership stays consistent
//! As on Redis: every change of the member set is one call of `heartbeat` or `leave`, which
//! lock the `cluster` row first, change `nodes` and bump the epoch together (at most once per
//! call) and announce it. Reads take the epoch and the members in one statement. A heartbeat
//! costs one statement whatever the number of members (the passed deadlines come from the
//! index, at most 64 per call), and brings the members back only when the caller does not
//! hold the epoch, after a stall, or when the node was added.
//!
//! # Wake-ups
//! Every node LISTENs on the one wake channel and keeps the wake-ups of the partitions it
//! listens to ([`Coordinator::listen`]) plus those of partitions the membership says it owns
//! (a queue created a moment ago, an ownership change under way): what the Redis coordinator
//! gets from a channel per partition and a fallback to the owner's channel, here with one
//! LISTEN per node. After the listening connection was remade, notifications sent meanwhile
//! are lost: the node gets a wake-up due now for every partition it listens to.
//!
//! # Stalls
//! A heartbeat that finds its own deadline passed while its row is still there (the database
//! or this node stood still), or that comes `heartbeat_ttl - heartbeat_period` or more after
//! its previous one (a failover to a standby may lack the last refreshes), sets the stall
//! marker for one TTL; while it is set only members dead since well before the silence are
//! removed (the Redis coordinator's rule, in SQL).

mod wire;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use delayq_postgres::{Database, Listener, ListenerEvent, ListenerOptions, RetryPolicy};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use self::wire::{Beat, Snapshot};
use crate::api::{
    publish_if_changed, Coordinator, CoordinatorConfig, Membership, NodeId, NodeInfo, Wakeup,
};
use crate::assignment::owner;
use crate::clock::{ClockSample, ClusterClock, LocalClock};
use crate::config::{host_name, validate};
use crate::error::{CoordinatorError, CoordinatorResult};
use crate::tasks::{Health, TaskGroup};
use crate::wakeups::{
    decode_wakeup, encode_wakeup, wakeup_mailbox, WakeupMonitor, WakeupReceiver, WakeupSender,
    WakeupStats, WAKEUP_CAPACITY,
};

/// How many round trips warm the clock up before a node registers.
const CLOCK_WARMUP_SAMPLES: usize = 3;

/// The most passed deadlines one heartbeat removes (more go with the next ones).
const MAX_REMOVED_PER_BEAT: i32 = 64;

/// The longest a channel name may be (PostgreSQL's identifier limit).
const MAX_CHANNEL_BYTES: usize = 63;

/// A [`Coordinator`] on PostgreSQL: the cluster clock is the database's `clock_timestamp()`,
/// membership lives in the schema's `cluster` and `nodes` tables, announcements and wake-ups
/// travel by LISTEN/NOTIFY.
///
/// Needs the schema migrated (migration 4; `PostgresStore::connect` and `delayq migrate` do
/// it). Shares the application's [`Database`] pool, plus one connection of its own for
/// LISTEN.
pub struct PostgresCoordinator {
    db: Database,
    id: NodeId,
    config: CoordinatorConfig,
    info: Option<NodeInfo>,
    clock: Arc<ClusterClock>,
    state: Arc<State>,
    wakeups: Mutex<Option<WakeupReceiver>>,
    wakeup_monitor: Option<WakeupMonitor>,
    tasks: TaskGroup,
    left: Mutex<bool>,
}

/// What the background tasks and the coordinator share.
struct State {
    membership: watch::Sender<Membership>,
    /// The partitions this node listens to.
    listening: Mutex<HashSet<(String, u32)>>,
    /// The highest epoch seen (the floor of a bump).
    highest_epoch: AtomicU64,
    /// Database time (ms) of this node's previous successful heartbeat; 0 for none.
    previous_beat_ms: AtomicU64,
    /// The wake-up mailbox (a member's).
    sender: Option<WakeupSender>,
    channels: Channels,
}

#[derive(Clone, Debug)]
struct Channels {
    events: String,
    wake: String,
}

impl std::fmt::Debug for PostgresCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCoordinator")
            .field("node", &self.id)
            .field("member", &self.info.is_some())
            .field("database", &self.db)
            .finish()
    }
}

impl PostgresCoordinator {
    /// Joins the cluster on `db` as a new member with a fresh id: warms the clock up, LISTENs,
    /// registers, and heartbeats in the background until [`Coordinator::leave`]. Gives up
    /// after `config.start_timeout` when the database cannot be reached.
    pub async fn join(
        db: Database,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(db, config, local_clock, true).await
    }

    /// Follows the cluster on `db` without joining it (a producer): membership, clock, `wake`
    /// and `nodes` work; it never registers and receives no wake-ups.
    pub async fn observe(
        db: Database,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
    ) -> CoordinatorResult<Arc<Self>> {
        Self::start(db, config, local_clock, false).await
    }

    /// The channel wake-ups travel on for the schema `schema` (its quoted form's name): what
    /// a transaction that schedules a task NOTIFYs, with the payload of
    /// [`PostgresCoordinator::wake_payload`].
    pub fn wake_channel(schema: &str) -> String {
        channel(schema, "wake")
    }

    /// The NOTIFY payload of `wakeup` on [`PostgresCoordinator::wake_channel`].
    pub fn wake_payload(wakeup: &Wakeup) -> String {
        encode_wakeup(wakeup)
    }

    async fn start(
        db: Database,
        config: CoordinatorConfig,
        local_clock: Arc<dyn LocalClock>,
        member: bool,
    ) -> CoordinatorResult<Arc<Self>> {
        validate(&config)?;
        let schema = db.schema().name().to_owned();
        let channels = Channels {
            events: channel(&schema, "events"),
            wake: channel(&schema, "wake"),
        };
        // Start-up waits for an unreachable database up to node.start_timeout.
        let starting = db.clone().with_retry(RetryPolicy {
            max_elapsed: config.start_timeout,
            ..db.retry_policy()
        });
        let clock = Arc::new(ClusterClock::new(local_clock));
        let mut first = None;
        for _ in 0..CLOCK_WARMUP_SAMPLES {
            first = Some(snapshot(&starting, &clock, None).await?);
        }
        let id = NodeId::random();
        let (sender, receiver) = wakeup_mailbox(WAKEUP_CAPACITY);
        let wakeup_monitor = member.then(|| sender.monitor());
        let state = Arc::new(State {
            membership: watch::Sender::new(Membership::default()),
            listening: Mutex::new(HashSet::new()),
            highest_epoch: AtomicU64::new(0),
            previous_beat_ms: AtomicU64::new(0),
            sender: member.then_some(sender),
            channels: channels.clone(),
        });
        if let Some(snapshot) = first {
            state.apply_snapshot(snapshot);
        }
        // LISTEN before registering: no announcement made after our registration is missed.
        let mut listen_to = vec![channels.events.clone()];
        if member {
            listen_to.push(channels.wake.clone());
        }
        let listener = Listener::start(&starting, ListenerOptions::new(listen_to))
            .await
            .map_err(|error| from_layer("listen", error))?;
        let now_ms = clock.now_ms();
        let info = member.then(|| NodeInfo {
            id: id.clone(),
            name: config.node_name.clone(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_ms: now_ms,
            last_heartbeat_ms: now_ms,
            queues: config.queues.clone(),
        });
        let this = Arc::new(PostgresCoordinator {
            db,
            id,
            config,
            info,
            clock,
            state,
            wakeups: Mutex::new(member.then_some(receiver)),
            wakeup_monitor,
            tasks: TaskGroup::default(),
            left: Mutex::new(false),
        });
        if let Some(info) = &this.info {
            let beat = this.heartbeat(&starting, info).await?;
            tracing::info!(node = %this.id, name = %info.name, epoch = beat.epoch, "joined the cluster on PostgreSQL");
        }
        this.tasks.push(tokio::spawn(follow(
            this.db.clone(),
            this.clock.clone(),
            this.state.clone(),
            this.id.clone(),
            listener,
        )));
        this.tasks
            .push(tokio::spawn(beat_loop(Arc::downgrade(&this))));
        if this.is_member() {
            this.tasks
                .push(tokio::spawn(compact_loop(Arc::downgrade(&this))));
        }
        Ok(this)
    }

    /// One heartbeat (a member) on `db`: registers or refreshes, removes the dead, and takes
    /// the membership when it changed.
    async fn heartbeat(&self, db: &Database, info: &NodeInfo) -> CoordinatorResult<Beat> {
        let period = self.config.heartbeat_period;
        let ttl = self.config.heartbeat_ttl;
        let request = wire::BeatRequest {
            id: info.id.as_str().to_owned(),
            name: info.name.clone(),
            host: info.host.clone(),
            pid: i64::from(info.pid),
            version: info.version.clone(),
            started_ms: to_db(info.started_ms),
            queues: wire::queues_to_db(&info.queues),
            ttl_ms: to_db(ttl.as_millis()),
            floor_epoch: to_db(self.state.highest_epoch.load(Ordering::SeqCst)),
            previous_ms: to_db(self.state.previous_beat_ms.load(Ordering::SeqCst)),
            stall_gap_ms: to_db(ttl.saturating_sub(period).as_millis()),
            held_epoch: self.state.held_epoch(),
            max_removed: MAX_REMOVED_PER_BEAT,
            channel: self.state.channels.events.clone(),
        };
        // Whether this node had registered before this beat: a first beat adds the node by
        // design, a later one only when the others removed it.
        let registered_before = request.previous_ms > 0;
        let sql = db.schema().substitute(wire::HEARTBEAT);
        let before = self.clock.local_now_us();
        let beat = db
            .run("heartbeat", move |client| {
                let request = request.clone();
                let sql = sql.clone();
                Box::pin(async move {
                    let statement = client.prepare_cached(&sql).await?;
                    let row = client.query_one(&statement, &request.params()).await?;
                    Ok(Beat::from_row(&row))
                })
            })
            .await
            .map_err(|error| from_layer("heartbeat", error))?;
        let beat = beat?;
        self.clock.record(ClockSample {
            local_before_us: before,
            server_us: beat.now_us,
            local_after_us: self.clock.local_now_us(),
        });
        self.state
            .previous_beat_ms
            .store(beat.now_us / 1_000, Ordering::SeqCst);
        if beat.added && registered_before {
            tracing::warn!(node = %self.id, epoch = beat.epoch, "this node's heartbeat had expired and it was removed: re-registered as a new member");
        }
        if beat.stalled {
            tracing::warn!(node = %self.id, epoch = beat.epoch, "a long silence since this node's previous heartbeat (a stall or a failover): nobody is removed for one TTL");
        }
        if !beat.removed.is_empty() {
            tracing::info!(node = %self.id, epoch = beat.epoch, removed = ?beat.removed, "removed members whose heartbeat expired");
        }
        self.state.apply(beat.epoch, beat.members.clone());
        Ok(beat)
    }

    fn is_member(&self) -> bool {
        self.info.is_some()
    }
}

impl State {
    /// The epoch of the membership held (none before the first read).
    fn held_epoch(&self) -> Option<i64> {
        let held = self.membership.borrow();
        (held.epoch > 0 || !held.members.is_empty()).then(|| to_db(held.epoch))
    }

    fn apply_snapshot(&self, snapshot: Snapshot) {
        self.apply(snapshot.epoch, snapshot.members);
    }

    /// Records `epoch` and, when they came along, the members.
    fn apply(&self, epoch: u64, members: Option<Vec<crate::api::Member>>) {
        self.highest_epoch.fetch_max(epoch, Ordering::SeqCst);
        if let Some(members) = members {
            publish_if_changed(&self.membership, Membership { epoch, members });
        }
    }

    /// Whether this node keeps `wakeup`: it listens to its partition, or owns it by the
    /// membership.
    fn keeps(&self, me: &NodeId, wakeup: &Wakeup) -> bool {
        let key = (wakeup.queue.clone(), wakeup.partition);
        if self.listening.lock().contains(&key) {
            return true;
        }
        let membership = self.membership.borrow();
        owner(&wakeup.queue, wakeup.partition, &membership.members) == Some(me)
    }
}

/// Reads the epoch (and the members when `held` is not that epoch) and records a clock sample.
async fn snapshot(
    db: &Database,
    clock: &ClusterClock,
    held: Option<i64>,
) -> CoordinatorResult<Snapshot> {
    let sql = db.schema().substitute(wire::SNAPSHOT);
    let before = clock.local_now_us();
    let snapshot = db
        .run("snapshot", move |client| {
            let sql = sql.clone();
            Box::pin(async move {
                let statement = client.prepare_cached(&sql).await?;
                let row = client.query_one(&statement, &[&held]).await?;
                Ok(Snapshot::from_row(&row))
            })
        })
        .await
        .map_err(|error| from_layer("snapshot", error))??;
    clock.record(ClockSample {
        local_before_us: before,
        server_us: snapshot.now_us,
        local_after_us: clock.local_now_us(),
    });
    Ok(snapshot)
}

/// Heartbeats (a member) or re-reads the membership (an observer) every period, while the
/// coordinator lives.
async fn beat_loop(this: std::sync::Weak<PostgresCoordinator>) {
    let Some(period) = this.upgrade().map(|c| c.config.heartbeat_period) else {
        return;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut health = Health::new("heartbeat");
    loop {
        ticks.tick().await;
        let Some(coordinator) = this.upgrade() else {
            return;
        };
        // One period of retries at most: the next heartbeat is due then.
        let db = coordinator.db.clone().with_retry(RetryPolicy {
            max_elapsed: period,
            ..coordinator.db.retry_policy()
        });
        let result = match &coordinator.info {
            Some(info) => coordinator.heartbeat(&db, info).await.map(|_| ()),
            None => {
                let held = coordinator.state.held_epoch();
                snapshot(&db, &coordinator.clock, held)
                    .await
                    .map(|snapshot| coordinator.state.apply_snapshot(snapshot))
            }
        };
        match result {
            Ok(()) => health.succeeded(coordinator.id.as_str()),
            Err(error) => health.failed(coordinator.id.as_str(), &error),
        }
    }
}

/// How often the first member (by id) looks whether a backlog left the schema's indexes or
/// small tables oversized, and compacts them ([`delayq_postgres::Compactor`]): one statement
/// a minute when nothing needs it.
const COMPACT_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

/// Every [`COMPACT_PERIOD`], on the first member only (the others would find the lock held
/// or nothing to do): compacts what a backlog left behind. Failures are logged; the next
/// period tries again.
async fn compact_loop(this: std::sync::Weak<PostgresCoordinator>) {
    let mut ticks =
        tokio::time::interval_at(tokio::time::Instant::now() + COMPACT_PERIOD, COMPACT_PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(coordinator) = this.upgrade() else {
            return;
        };
        let first = coordinator
            .state
            .membership
            .borrow()
            .members
            .first()
            .is_some_and(|member| member.id == coordinator.id);
        if !first {
            continue;
        }
        let compactor = delayq_postgres::Compactor::new(&coordinator.db);
        drop(coordinator);
        match compactor.run().await {
            Ok(report) if !report.done.is_empty() || !report.failed.is_empty() => {
                tracing::info!(done = ?report.done, failed = ?report.failed, "compacted the schema after a backlog");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "could not look whether the schema needs compacting")
            }
        }
    }
}

/// Reads the LISTEN connection: announcements (re-read the membership when the epoch is new),
/// wake-ups (into the mailbox when this node keeps them), and resumptions (re-read, and a
/// wake-up due now for every partition listened to).
async fn follow(
    db: Database,
    clock: Arc<ClusterClock>,
    state: Arc<State>,
    me: NodeId,
    mut listener: Listener,
) {
    let mut health = Health::new("membership read");
    while let Some(event) = listener.next().await {
        let refresh = match event {
            ListenerEvent::Notification(note) if note.channel == state.channels.events => {
                let epoch: u64 = note.payload.parse().unwrap_or(u64::MAX);
                let held = state.membership.borrow().epoch;
                epoch != held
            }
            ListenerEvent::Notification(note) => {
                if let Some(sender) = &state.sender {
                    match decode_wakeup(note.payload.as_bytes()) {
                        Some(wakeup) if state.keeps(&me, &wakeup) => {
                            sender.send(wakeup);
                        }
                        Some(_) => {}
                        None => sender.reject_malformed(),
                    }
                }
                false
            }
            ListenerEvent::Resumed(reason) => {
                tracing::info!(node = %me, ?reason, "wake-up connection resumed: every listened partition gets a wake-up due now");
                if let Some(sender) = &state.sender {
                    let now_ms = clock.now_ms();
                    let listening: Vec<(String, u32)> =
                        state.listening.lock().iter().cloned().collect();
                    for (queue, partition) in listening {
                        sender.send(Wakeup {
                            queue,
                            partition,
                            due_ms: now_ms,
                        });
                    }
                }
                true
            }
        };
        if refresh {
            match snapshot(&db, &clock, state.held_epoch()).await {
                Ok(snapshot) => {
                    health.succeeded(me.as_str());
                    state.apply_snapshot(snapshot);
                }
                // The next heartbeat (or observer read) brings it within one period.
                Err(error) => health.failed(me.as_str(), &error),
            }
        }
    }
}

#[async_trait]
impl Coordinator for PostgresCoordinator {
    fn node_id(&self) -> &NodeId {
        &self.id
    }

    fn membership(&self) -> watch::Receiver<Membership> {
        self.state.membership.subscribe()
    }

    fn clock(&self) -> Arc<ClusterClock> {
        self.clock.clone()
    }

    fn take_wakeups(&self) -> Option<WakeupReceiver> {
        self.wakeups.lock().take()
    }

    fn wakeup_stats(&self) -> Option<WakeupStats> {
        self.wakeup_monitor.as_ref().map(WakeupMonitor::stats)
    }

    fn listen(&self, partitions: Vec<(String, u32)>) {
        let Some(sender) = &self.state.sender else {
            return;
        };
        let set: HashSet<(String, u32)> = partitions.into_iter().collect();
        // One LISTEN serves every partition, so they are confirmed at once.
        sender.set_listening(set.len());
        *self.state.listening.lock() = set;
    }

    async fn wake(&self, wakeup: Wakeup) -> CoordinatorResult<()> {
        let channel = self.state.channels.wake.clone();
        let payload = encode_wakeup(&wakeup);
        self.db
            .run("wake", move |client| {
                let channel = channel.clone();
                let payload = payload.clone();
                Box::pin(async move {
                    let statement = client.prepare_cached(wire::WAKE).await?;
                    client.execute(&statement, &[&channel, &payload]).await?;
                    Ok(())
                })
            })
            .await
            .map_err(|error| from_layer("wake", error))
    }

    async fn nodes(&self) -> CoordinatorResult<Vec<NodeInfo>> {
        let sql = self.db.schema().substitute(wire::NODES);
        let rows = self
            .db
            .run("nodes", move |client| {
                let sql = sql.clone();
                Box::pin(async move {
                    let statement = client.prepare_cached(&sql).await?;
                    client.query(&statement, &[]).await
                })
            })
            .await
            .map_err(|error| from_layer("nodes", error))?;
        rows.iter().map(wire::node_info).collect()
    }

    async fn leave(&self) -> CoordinatorResult<()> {
        if std::mem::replace(&mut *self.left.lock(), true) {
            return Ok(());
        }
        self.tasks.stop_all().await;
        if !self.is_member() {
            return Ok(());
        }
        let sql = self.db.schema().substitute(wire::LEAVE);
        let id = self.id.as_str().to_owned();
        let floor = to_db(self.state.highest_epoch.load(Ordering::SeqCst));
        let channel = self.state.channels.events.clone();
        let snapshot = self
            .db
            .run("leave", move |client| {
                let (sql, id, channel) = (sql.clone(), id.clone(), channel.clone());
                Box::pin(async move {
                    let statement = client.prepare_cached(&sql).await?;
                    let row = client
                        .query_one(&statement, &[&id, &floor, &channel])
                        .await?;
                    Ok(Snapshot::from_leave_row(&row))
                })
            })
            .await
            .map_err(|error| from_layer("leave", error))??;
        tracing::info!(node = %self.id, epoch = snapshot.epoch, "left the cluster on PostgreSQL");
        self.state.apply_snapshot(snapshot);
        Ok(())
    }

    fn crash(&self) {
        self.tasks.abort_all();
    }
}

/// `<schema>_<what>`, or, when that is longer than a channel name may be, `delayq_<16 hex
/// digits of the schema's hash>_<what>`.
fn channel(schema: &str, what: &str) -> String {
    let plain = format!("{schema}_{what}");
    if plain.len() <= MAX_CHANNEL_BYTES {
        return plain;
    }
    let hash = xxhash_rust::xxh3::xxh3_64(schema.as_bytes());
    format!("delayq_{hash:016x}_{what}")
}

/// A millisecond, epoch or count as the database's `bigint`.
fn to_db(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// The coordinator's error for a failure of the PostgreSQL layer during `operation`.
fn from_layer(operation: &'static str, error: delayq_postgres::Error) -> CoordinatorError {
    match error {
        delayq_postgres::Error::InvalidConfig {
            field,
            value,
            reason,
        } => CoordinatorError::InvalidConfig {
            key: field,
            value: format!("{value} ({reason})"),
            reason: "not a usable PostgreSQL setting",
        },
        delayq_postgres::Error::TlsFile {
            field,
            path,
            reason,
        } => CoordinatorError::InvalidConfig {
            key: field,
            value: format!("{} ({reason})", path.display()),
            reason: "cannot be read",
        },
        other => CoordinatorError::Backend {
            operation,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_postgres_identifiers() {
        assert_eq!(channel("delayq", "wake"), "delayq_wake");
        let long = "s".repeat(63);
        let named = channel(&long, "events");
        assert!(named.len() <= MAX_CHANNEL_BYTES, "{named}");
        assert_ne!(named, channel(&"t".repeat(63), "events"));
    }
}
