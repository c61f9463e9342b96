//! A `PING` loop on a thread and a connection of its own, beside a scenario: how long Redis
//! takes to answer while the scenario loads it, apart from the bench runtime's own delays
//! (its current-thread runtime shares nothing with the nodes').

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use delayq_redis::redis;
use delayq_redis::{ConnectOptions, RedisConnection};
use hdrhistogram::Histogram;

use crate::cli::harness::histogram;

/// Pause between two pings.
const PERIOD: Duration = Duration::from_millis(5);

/// The running loop; [`Pinger::stop`] returns the round trips (µs).
pub(super) struct Pinger {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Option<Histogram<u64>>>,
}

impl Pinger {
    /// Starts pinging the server (or cluster seed) of `options`.
    pub(super) fn start(options: ConnectOptions) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(ping_until(options, stopping))
        });
        Pinger { stop, thread }
    }

    /// Stops the loop; the round trips, unless the connection failed.
    pub(super) fn stop(self) -> Option<Histogram<u64>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().ok().flatten()
    }
}

async fn ping_until(options: ConnectOptions, stop: Arc<AtomicBool>) -> Option<Histogram<u64>> {
    let redis = match RedisConnection::connect(options).await {
        Ok(redis) => redis,
        Err(error) => {
            tracing::warn!(%error, "no PING figures: connecting failed");
            return None;
        }
    };
    let mut round_trips = histogram();
    let ping = redis::cmd("PING");
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        if let Err(error) = redis.query::<String>("PING", &ping).await {
            tracing::warn!(%error, "a PING failed");
        } else {
            round_trips.saturating_record(sent.elapsed().as_micros() as u64);
        }
        tokio::time::sleep(PERIOD).await;
    }
    Some(round_trips)
}
