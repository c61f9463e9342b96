//! The pub/sub side of a Redis coordinator: one [`Subscriber`] (delayq-redis: `SUBSCRIBE` on
//! one server or a Sentinel master, sharded `SSUBSCRIBE` on a Redis Cluster) that hears
//!
//! - the membership announcements (`{cluster}` slot): each asks for a read (of the registry,
//!   when the epoch is not the one this node holds);
//! - for a member, its own node channel (`{cluster}` slot): wake-ups for partitions nobody
//!   listened to when they were sent;
//! - for a member, the wake-up channel of every partition given to
//!   [`crate::Coordinator::listen`] (each in its partition's slot).
//!
//! The subscriber restores its subscriptions itself after a lost connection, a failover or a
//! slot move, and says so ([`PubSubEvent::Resubscribed`]); messages published meanwhile are
//! lost, so a restored announcement channel triggers a re-read, and a restored partition
//! channel a wake-up "due now" for that partition (its owner looks at it at once, instead of
//! at its next periodic pull). Subscriptions that fail are retried every heartbeat period.
//!
//! A half-open connection (a peer gone without a reset: a dead host, a dropped route) never
//! closes by itself, and the server would go on counting it as a subscriber. So after a
//! quiet spell of one heartbeat TTL a member publishes a probe on its own node channel;
//! when nothing at all arrives within the operation timeout after it, the subscriber is
//! made anew (and every channel subscribed again). During a flood the probe waits behind the
//! backlog, but then other messages arrive, which is proof enough.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_redis::{PubSubEvent, Subscriber};
use tokio::sync::{oneshot, watch};
use tokio::time::MissedTickBehavior;

use super::state::Shared;
use crate::api::Wakeup;
use crate::error::CoordinatorError;
use crate::tasks::{Backoff, Health};
use crate::wakeups::decode_wakeup;
use crate::wakeups::WakeupSender;

/// What a member publishes on its own node channel to check that its subscription still
/// hears (never a well-formed wake-up).
const PROBE: &[u8] = b"probe";

/// The partitions a node listens to, by their wake-up channel.
pub(crate) type Partitions = Arc<BTreeMap<String, (String, u32)>>;

/// Keeps the subscriptions of one coordinator, and hands what arrives on.
pub(crate) struct Listener {
    shared: Arc<Shared>,
    /// The mailbox of a member; `None` for an observer (it hears announcements only).
    wakeups: Option<WakeupSender>,
    /// The partitions to listen to, as last given to `listen`.
    wanted: watch::Receiver<Partitions>,
    /// Channels always subscribed: the announcements, and a member's node channel.
    fixed: Vec<String>,
    node_channel: Option<String>,
    /// Partition channels whose subscription is confirmed.
    subscribed: HashSet<String>,
    /// Partition channels that were subscribed when the subscriber was lost: a wake-up may
    /// have been missed on them.
    restoring: HashSet<String>,
    health: Health,
    /// When the subscriber last received anything.
    last_heard: Instant,
}

impl Listener {
    pub(crate) fn new(
        shared: Arc<Shared>,
        wakeups: Option<WakeupSender>,
        wanted: watch::Receiver<Partitions>,
    ) -> Self {
        let node_channel = wakeups
            .as_ref()
            .map(|_| shared.keys.node_wake_channel(shared.id.as_str()));
        let mut fixed = vec![shared.keys.events.clone()];
        fixed.extend(node_channel.clone());
        Listener {
            shared,
            wakeups,
            wanted,
            fixed,
            node_channel,
            subscribed: HashSet::new(),
            restoring: HashSet::new(),
            health: Health::new("subscription"),
            last_heard: Instant::now(),
        }
    }

    /// Runs until the coordinator is gone. `ready` is told once the announcement (and node)
    /// channels are subscribed for the first time.
    pub(crate) async fn run(mut self, mut ready: Option<oneshot::Sender<()>>) {
        let node = self.shared.id.to_string();
        let floor = Duration::from_millis(50);
        // Capped at one period: wake-ups sent while unsubscribed are lost, so come back soon.
        let mut backoff = Backoff::new(floor, self.shared.config.heartbeat_period.max(floor));
        let mut retries = tokio::time::interval(self.shared.config.heartbeat_period);
        retries.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let mut subscriber = match self.connect().await {
                Ok(subscriber) => subscriber,
                Err(error) => {
                    self.health.failed(&node, &error);
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            };
            self.health.succeeded(&node);
            backoff.reset();
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            // Announcements sent while we were not listening are lost: catch up.
            self.shared.refresh.notify_one();
            self.reconcile(&subscriber).await;
            self.last_heard = Instant::now();
            // The probe in flight: when it was sent.
            let mut probe: Option<Instant> = None;
            let lost = loop {
                tokio::select! {
                    event = subscriber.next_event() => match event {
                        Some(event) => {
                            self.last_heard = Instant::now();
                            self.handle(event);
                        }
                        None => break "the subscriber's connection task ended",
                    },
                    changed = self.wanted.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        self.reconcile(&subscriber).await;
                    }
                    _ = retries.tick() => {
                        if self.deaf(&mut probe).await {
                            break "the subscription heard nothing, not even its own probe";
                        }
                        self.reconcile(&subscriber).await;
                    }
                }
            };
            self.health.failed(&node, &lost);
            self.restoring.extend(self.subscribed.drain());
            self.report_listening();
        }
    }

    /// Whether the subscription is deaf: a probe sent after a quiet spell got no answer,
    /// and nothing else arrived either. Sends the probe when it is time.
    async fn deaf(&self, probe: &mut Option<Instant>) -> bool {
        let Some(channel) = &self.node_channel else {
            // An observer hears announcements only; it checks the epoch every period anyway.
            return false;
        };
        let shared = &self.shared;
        match *probe {
            Some(sent) if sent.elapsed() >= shared.operation_timeout => {
                *probe = None;
                self.last_heard < sent
            }
            Some(_) => false,
            None if self.last_heard.elapsed() >= shared.config.heartbeat_ttl => {
                let sent = Instant::now();
                // A probe that cannot be sent (Redis is down) proves nothing either way.
                if shared
                    .bounded("probe", shared.redis.publish(channel, PROBE))
                    .await
                    .is_ok()
                {
                    *probe = Some(sent);
                }
                false
            }
            None => false,
        }
    }

    /// A new subscriber with the fixed channels subscribed.
    async fn connect(&self) -> Result<Subscriber, CoordinatorError> {
        let shared = &self.shared;
        let subscriber = shared
            .bounded("subscribe", shared.redis.subscriber())
            .await?;
        for channel in &self.fixed {
            let subscribed =
                tokio::time::timeout(shared.operation_timeout, subscriber.subscribe(channel)).await;
            match subscribed {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    return Err(CoordinatorError::from_redis(
                        "subscribe",
                        shared.redis.error("subscribe", &error),
                    ))
                }
                Err(_) => {
                    return Err(CoordinatorError::Backend {
                        operation: "subscribe",
                        message: format!("no confirmation within {:?}", shared.operation_timeout),
                    })
                }
            }
        }
        Ok(subscriber)
    }

    /// Brings the partition subscriptions in line with the wanted set. Stops at the first
    /// failure (Redis is probably unreachable; the next retry tick goes on).
    async fn reconcile(&mut self, subscriber: &Subscriber) {
        let wanted = self.wanted.borrow_and_update().clone();
        let timeout = self.shared.operation_timeout;
        let gone: Vec<String> = self
            .subscribed
            .iter()
            .filter(|channel| !wanted.contains_key(*channel))
            .cloned()
            .collect();
        self.restoring
            .retain(|channel| wanted.contains_key(channel));
        for channel in gone {
            self.subscribed.remove(&channel);
            // Best effort: a message still arriving on it is ignored.
            match tokio::time::timeout(timeout, subscriber.unsubscribe(&channel)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::debug!(node = %self.shared.id, %channel, %error, "unsubscribe failed");
                }
                Err(_) => {
                    tracing::debug!(node = %self.shared.id, %channel, "unsubscribe not confirmed in time");
                }
            }
        }
        for (channel, (queue, partition)) in wanted.iter() {
            if self.subscribed.contains(channel) {
                continue;
            }
            match tokio::time::timeout(timeout, subscriber.subscribe(channel)).await {
                Ok(Ok(())) => {
                    self.subscribed.insert(channel.clone());
                    if self.restoring.remove(channel) {
                        self.catch_up(queue, *partition);
                    }
                }
                Ok(Err(error)) => {
                    tracing::debug!(node = %self.shared.id, %channel, %error, "wake-up subscription failed; retrying");
                    break;
                }
                Err(_) => {
                    tracing::debug!(node = %self.shared.id, %channel, "wake-up subscription not confirmed in time; retrying");
                    break;
                }
            }
        }
        self.report_listening();
    }

    fn report_listening(&self) {
        if let Some(wakeups) = &self.wakeups {
            wakeups.set_listening(self.subscribed.len());
        }
    }

    /// One message or notice of the subscriber.
    fn handle(&mut self, event: PubSubEvent) {
        match event {
            PubSubEvent::Message { channel, payload } => self.message(&channel, &payload),
            PubSubEvent::Resubscribed { channels } => {
                let wanted = self.wanted.borrow().clone();
                for channel in channels {
                    if channel == self.shared.keys.events {
                        self.shared.refresh.notify_one();
                    } else if let Some((queue, partition)) = wanted.get(&channel) {
                        tracing::debug!(node = %self.shared.id, %channel, "wake-up subscription restored; looking at the partition now");
                        self.subscribed.insert(channel.clone());
                        self.restoring.remove(&channel);
                        self.catch_up(queue, *partition);
                    }
                }
                self.report_listening();
            }
        }
    }

    /// A message: an announcement asks for a re-read, a wake-up goes to the mailbox.
    fn message(&self, channel: &str, payload: &[u8]) {
        if channel == self.shared.keys.events {
            self.shared.refresh.notify_one();
            return;
        }
        let Some(wakeups) = &self.wakeups else { return };
        let expected = if Some(channel) == self.node_channel.as_deref() {
            if payload == PROBE {
                return;
            }
            None
        } else {
            match self.wanted.borrow().get(channel) {
                Some(partition) => Some(partition.clone()),
                // A channel just left: its owner is elsewhere now.
                None => return,
            }
        };
        let wakeup = decode_wakeup(payload).filter(|wakeup| {
            expected.as_ref().is_none_or(|(queue, partition)| {
                &wakeup.queue == queue && wakeup.partition == *partition
            })
        });
        match wakeup {
            // Never waits: a full mailbox coalesces or drops (and counts it).
            Some(wakeup) => {
                wakeups.send(wakeup);
            }
            None => {
                wakeups.reject_malformed();
                tracing::debug!(
                    node = %self.shared.id,
                    %channel,
                    payload = %String::from_utf8_lossy(&payload[..payload.len().min(128)]),
                    "ignored a malformed wake-up"
                );
            }
        }
    }

    /// A wake-up "due now" for a partition whose messages may have been lost.
    fn catch_up(&self, queue: &str, partition: u32) {
        if let Some(wakeups) = &self.wakeups {
            wakeups.send(Wakeup {
                queue: queue.to_owned(),
                partition,
                due_ms: self.shared.clock.now_ms(),
            });
        }
    }
}
