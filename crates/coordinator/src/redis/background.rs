//! The background tasks of a Redis coordinator: heartbeat (or, for an observer, a periodic
//! re-read), the pub/sub subscriber, and the refresher that re-reads on announcements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::{PubSub, PubSubSink, PubSubStream};
use tokio::sync::oneshot;
use tokio::time::MissedTickBehavior;

use super::state::Shared;
use super::wire::decode_wakeup;
use crate::tasks::{Backoff, Health};
use crate::wakeups::WakeupSender;

/// An interval whose first tick is one period from now (the caller just did a round trip).
fn every(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// Every period: the heartbeat of a member (which also removes dead members, samples the clock
/// and re-reads the membership), or the snapshot of an observer. Failures are retried next
/// period and logged once per outage.
pub(crate) async fn heartbeat_loop(shared: Arc<Shared>) {
    let node = shared.id.to_string();
    let mut health = Health::new(if shared.entry.is_some() {
        "heartbeat"
    } else {
        "membership re-read"
    });
    let mut ticks = every(shared.config.heartbeat_period);
    loop {
        ticks.tick().await;
        match shared.heartbeat().await {
            Ok(reply) => {
                health.succeeded(&node);
                if reply.added && shared.entry.is_some() {
                    tracing::warn!(
                        node,
                        epoch = reply.epoch,
                        "this node's registry entry had vanished (expired during an outage, or Redis lost its data): re-registered as a new member"
                    );
                }
                if reply.stalled {
                    tracing::warn!(
                        node,
                        epoch = reply.epoch,
                        "this node's heartbeat had expired while it was registered: Redis or this node stood still for longer than node.heartbeat_ttl; nobody is removed for one TTL, so that every live node can beat again"
                    );
                }
                if !reply.removed.is_empty() {
                    tracing::info!(node, epoch = reply.epoch, removed = ?reply.removed, "removed members whose heartbeat expired");
                }
            }
            Err(error) => health.failed(&node, &error),
        }
    }
}

/// Re-reads the membership whenever asked (announcements); requests that arrive during a
/// read are folded into one more read.
pub(crate) async fn refresh_loop(shared: Arc<Shared>) {
    loop {
        shared.refresh.notified().await;
        if let Err(error) = shared.snapshot().await {
            // The heartbeat reports outages; the next announcement or period retries.
            tracing::debug!(node = %shared.id, %error, "re-read after an announcement failed");
        }
    }
}

/// Keeps a subscription to the announcement channel (and, for a member, its wake-up channel)
/// open, reconnecting with backoff. `subscribed` is told once the first subscription is up.
pub(crate) async fn subscriber_loop(
    shared: Arc<Shared>,
    wakeups: Option<WakeupSender>,
    mut subscribed: Option<oneshot::Sender<()>>,
) {
    let node = shared.id.to_string();
    let wake_channel = wakeups
        .as_ref()
        .map(|_| shared.keys.wake_channel(shared.id.as_str()));
    let mut health = Health::new("subscription");
    // Capped at one period: wake-ups sent while unsubscribed are lost, so come back soon.
    let floor = Duration::from_millis(50);
    let mut backoff = Backoff::new(floor, shared.config.heartbeat_period.max(floor));
    loop {
        match shared
            .bounded("subscribe", subscribe(&shared, wake_channel.as_deref()))
            .await
        {
            Ok(pubsub) => {
                health.succeeded(&node);
                backoff.reset();
                if let Some(subscribed) = subscribed.take() {
                    let _ = subscribed.send(());
                }
                // Announcements sent while we were not listening are lost: catch up.
                shared.refresh.notify_one();
                let (sink, stream) = pubsub.split();
                listen(
                    &shared,
                    sink,
                    stream,
                    wake_channel.as_deref(),
                    wakeups.as_ref(),
                )
                .await;
                health.failed(&node, &"subscription connection lost");
            }
            Err(error) => health.failed(&node, &error),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

async fn subscribe(shared: &Shared, wake_channel: Option<&str>) -> redis::RedisResult<PubSub> {
    let mut pubsub = shared.client.get_async_pubsub().await?;
    pubsub.subscribe(&shared.keys.events).await?;
    if let Some(channel) = wake_channel {
        pubsub.subscribe(channel).await?;
    }
    Ok(pubsub)
}

/// Whether a PING sent on the subscription was answered in time.
type PingReply = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Handles messages until the connection is lost (closed, or silent and deaf to a PING).
///
/// The stream is read without pause, also while a PING waits for its reply: redis-rs hands
/// messages over through an unbounded in-process queue, so a reader that stopped would let
/// a flood pile up in memory. For the same reason a PING that gets no answer in time only
/// counts against the connection when nothing at all arrived meanwhile: during a flood its
/// reply waits behind thousands of messages, and dropping the connection then would lose
/// every wake-up still queued on it.
async fn listen(
    shared: &Shared,
    sink: PubSubSink,
    mut stream: PubSubStream,
    wake_channel: Option<&str>,
    wakeups: Option<&WakeupSender>,
) {
    let quiet = shared.config.heartbeat_ttl;
    let mut checks = every(quiet);
    let mut last_heard = Instant::now();
    // The PING in flight, with when it was sent.
    let mut probe: Option<(Instant, PingReply)> = None;
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else { return };
                last_heard = Instant::now();
                handle_message(shared, &message, wake_channel, wakeups);
            }
            answered = async {
                match probe.as_mut() {
                    Some((_, reply)) => reply.await,
                    None => std::future::pending().await,
                }
            } => {
                let sent = probe.take().map(|(sent, _)| sent);
                if !answered && sent.is_some_and(|sent| last_heard < sent) {
                    return;
                }
            }
            _ = checks.tick() => match &probe {
                // A half-open connection never closes by itself: a PING after a quiet spell finds it.
                None if last_heard.elapsed() >= quiet => {
                    let mut sink = sink.clone();
                    let timeout = shared.operation_timeout;
                    probe = Some((Instant::now(), Box::pin(async move {
                        matches!(tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await, Ok(Ok(_)))
                    })));
                }
                _ => {}
            },
        }
    }
}

/// One pub/sub message: an announcement asks for a re-read, a wake-up goes to the mailbox.
fn handle_message(
    shared: &Shared,
    message: &redis::Msg,
    wake_channel: Option<&str>,
    wakeups: Option<&WakeupSender>,
) {
    let channel = message.get_channel_name();
    if channel == shared.keys.events {
        shared.refresh.notify_one();
    } else if Some(channel) == wake_channel {
        let payload = message.get_payload_bytes();
        match (decode_wakeup(payload), wakeups) {
            // Never waits: a full mailbox coalesces or drops (and counts it).
            (Some(wakeup), Some(wakeups)) => {
                wakeups.send(wakeup);
            }
            (None, wakeups) => {
                if let Some(wakeups) = wakeups {
                    wakeups.reject_malformed();
                }
                tracing::debug!(
                    node = %shared.id,
                    payload = %String::from_utf8_lossy(&payload[..payload.len().min(128)]),
                    "ignored a malformed wake-up"
                );
            }
            (Some(_), None) => {}
        }
    }
}
