//! The background tasks of a Redis coordinator: heartbeat (or, for an observer, a periodic
//! epoch check) and the refresher that checks on announcements. The pub/sub side is in
//! `listener`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::state::Shared;
use crate::tasks::Health;

/// An interval whose first tick is one period from now (the caller just did a round trip).
fn every(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// Every period: the heartbeat of a member (which also removes dead members, samples the clock
/// and re-reads the membership if its epoch changed), or the conditional snapshot of an
/// observer. Failures (a lost
/// connection, a failover under way) are retried next period and logged once per outage; a
/// slow round trip is cut off after the operation timeout, so nothing holds the next beat up.
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
                        "a stall: this node's heartbeat had expired while it was registered, or it could not beat for most of node.heartbeat_ttl (Redis stood still, failed over, or this node did); nobody is removed for one TTL, so that every live node can beat again"
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

/// Checks the membership whenever asked (announcements, a restored subscription), reading the
/// registry only if the epoch is not the one this node holds; requests that arrive during a
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
