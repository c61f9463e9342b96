//! Shared helpers of the connection-layer tests.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use delayq_redis::{ConnectOptions, PubSubEvent, Subscriber, Timeouts, Topology};

/// Options with short timeouts fit for tests on a busy 2-core machine.
pub fn options(topology: Topology) -> ConnectOptions {
    ConnectOptions::new(topology).with_timeouts(Timeouts {
        connect: Duration::from_millis(500),
        response: Duration::from_secs(2),
        start: Duration::from_secs(10),
        failover: Duration::from_secs(15),
    })
}

/// Polls `attempt` every 100 ms until it returns `Some` or `limit` passes.
pub async fn eventually<T, F, Fut>(limit: Duration, mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = attempt().await {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The next message on `channel` within `limit`, skipping other channels; the channels of
/// `Resubscribed` notices met on the way are added to `restored`.
pub async fn next_message(
    subscriber: &mut Subscriber,
    channel: &str,
    limit: Duration,
    restored: &mut Vec<String>,
) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, subscriber.next_event()).await {
            Ok(Some(PubSubEvent::Message {
                channel: got,
                payload,
            })) if got == channel => return Some(payload),
            Ok(Some(PubSubEvent::Resubscribed { channels })) => restored.extend(channels),
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Publishes `payload` on `channel` every 200 ms until `subscriber` receives it, for at most
/// `limit`. Returns how long that took and the channels of the `Resubscribed` notices met.
pub async fn publish_until_received(
    redis: &delayq_redis::RedisConnection,
    subscriber: &mut Subscriber,
    channel: &str,
    payload: &[u8],
    limit: Duration,
) -> Option<(Duration, Vec<String>)> {
    let started = Instant::now();
    let mut restored = Vec::new();
    while started.elapsed() < limit {
        let _ = redis.publish(channel, payload).await;
        let got = next_message(
            subscriber,
            channel,
            Duration::from_millis(200),
            &mut restored,
        )
        .await;
        if got.as_deref() == Some(payload) {
            return Some((started.elapsed(), restored));
        }
    }
    None
}
