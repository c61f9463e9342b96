//! The background tasks of a Redis coordinator: heartbeat (or, for an observer, a periodic
//! re-read), the pub/sub subscriber, and the refresher that re-reads on announcements.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSub, PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::MissedTickBehavior;

use super::state::Shared;
use super::wire::decode_wakeup;
use crate::api::Wakeup;
use crate::tasks::{Backoff, Health};

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
    wakeups: Option<mpsc::UnboundedSender<Wakeup>>,
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

/// Handles messages until the connection is lost (closed, or silent to a PING).
async fn listen(
    shared: &Shared,
    mut sink: PubSubSink,
    mut stream: PubSubStream,
    wake_channel: Option<&str>,
    wakeups: Option<&mpsc::UnboundedSender<Wakeup>>,
) {
    // A half-open connection never closes by itself: a PING now and then finds it.
    let mut pings = every(shared.config.heartbeat_ttl);
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else { return };
                let channel = message.get_channel_name();
                if channel == shared.keys.events {
                    shared.refresh.notify_one();
                } else if Some(channel) == wake_channel {
                    let payload: String = message.get_payload().unwrap_or_default();
                    match (decode_wakeup(&payload), wakeups) {
                        (Some(wakeup), Some(wakeups)) => {
                            // The engine may have dropped the receiver: then nobody wants it.
                            let _ = wakeups.send(wakeup);
                        }
                        (None, _) => tracing::debug!(node = %shared.id, payload, "ignored a malformed wake-up"),
                        _ => {}
                    }
                }
            }
            _ = pings.tick() => {
                if shared.bounded("subscriber ping", sink.ping::<redis::Value>()).await.is_err() {
                    return;
                }
            }
        }
    }
}
