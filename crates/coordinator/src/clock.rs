//! The cluster clock: Redis `TIME` tracked as an offset from the local clock.
//!
//! Each sample is taken around one round trip to Redis: `local_before`, the server's time,
//! `local_after`. Assuming the reply was stamped half-way, the offset is
//! `server - (local_before + rtt / 2)`, good to within `rtt / 2`. The estimator keeps the
//! samples of a recent window and uses the one with the smallest round trip (NTP's
//! "minimum delay" filter): a sample delayed by a busy network or scheduler is simply not
//! chosen. Among equally fast samples the newest wins, so slow drift is followed.
//!
//! Each sample only says "the offset lies within `rtt / 2` of this value". When a new sample
//! cannot be reconciled with the current best (their intervals do not overlap, even with a
//! millisecond of rounding), one of the clocks was stepped (NTP, a VM resumed): the window
//! restarts from the new sample instead of trusting the old ones for another 16 heartbeats.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// The machine's own clock, in milliseconds since the epoch. Tests substitute a skewed or
/// manual one.
pub trait LocalClock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch, according to this machine.
    fn now_ms(&self) -> u64;

    /// Now, in microseconds since the Unix epoch. Clock samples use it, so that the offset is
    /// not off by a truncated millisecond; the default is `now_ms() * 1000`.
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1_000)
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl LocalClock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.now_us() / 1_000
    }

    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_micros() as u64)
            .unwrap_or(0)
    }
}

/// The system clock shifted by a fixed amount: a machine whose clock is wrong.
#[derive(Debug, Clone, Copy)]
pub struct SkewedClock {
    /// Milliseconds added to the system clock (negative: behind).
    pub skew_ms: i64,
}

impl LocalClock for SkewedClock {
    fn now_ms(&self) -> u64 {
        self.now_us() / 1_000
    }

    fn now_us(&self) -> u64 {
        SystemClock
            .now_us()
            .saturating_add_signed(self.skew_ms.saturating_mul(1_000))
    }
}

/// A clock that only moves when told to (for the memory backend's tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        ManualClock {
            now_ms: std::sync::atomic::AtomicU64::new(now_ms),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl LocalClock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// One measurement of the server's time against the local clock, in microseconds (Redis
/// `TIME` gives microseconds; millisecond stamps would put the offset off by up to 1 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Local time just before the request was sent, in µs.
    pub local_before_us: u64,
    /// The server's time from its reply, in µs.
    pub server_us: u64,
    /// Local time just after the reply arrived, in µs.
    pub local_after_us: u64,
}

impl ClockSample {
    fn round_trip_us(&self) -> u64 {
        self.local_after_us.saturating_sub(self.local_before_us)
    }

    fn offset_us(&self) -> i64 {
        let midpoint = self.local_before_us as i64 + (self.round_trip_us() as i64) / 2;
        self.server_us as i64 - midpoint
    }
}

/// How many recent samples the estimator chooses from.
const SAMPLE_WINDOW: usize = 16;

/// The cluster clock shared by every part of a node. Cheap to read from any thread.
pub struct ClusterClock {
    local: Arc<dyn LocalClock>,
    offset_us: AtomicI64,
    samples: Mutex<VecDeque<ClockSample>>,
}

impl std::fmt::Debug for ClusterClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClock")
            .field("offset_us", &self.offset_us.load(Ordering::Relaxed))
            .finish()
    }
}

impl ClusterClock {
    /// A clock over `local` with no offset yet (until the first sample).
    pub fn new(local: Arc<dyn LocalClock>) -> Self {
        ClusterClock {
            local,
            offset_us: AtomicI64::new(0),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLE_WINDOW)),
        }
    }

    /// A clock that is the system clock (offset 0 until samples say otherwise).
    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock))
    }

    /// Local time, in milliseconds, from the underlying local clock.
    pub fn local_now_ms(&self) -> u64 {
        self.local.now_ms()
    }

    /// Local time, in microseconds, from the underlying local clock.
    pub fn local_now_us(&self) -> u64 {
        self.local.now_us()
    }

    /// Now on the cluster clock, in milliseconds since the epoch (rounded down).
    pub fn now_ms(&self) -> u64 {
        self.now_us() / 1_000
    }

    /// Now on the cluster clock, in microseconds since the epoch.
    pub fn now_us(&self) -> u64 {
        self.local
            .now_us()
            .saturating_add_signed(self.offset_us.load(Ordering::Relaxed))
    }

    /// The current estimate of `cluster - local`, in milliseconds (rounded toward zero).
    pub fn offset_ms(&self) -> i64 {
        self.offset_us.load(Ordering::Relaxed) / 1_000
    }

    /// Whether at least one sample has been recorded (before that, cluster time is local time).
    pub fn is_synchronized(&self) -> bool {
        !self.samples.lock().is_empty()
    }

    /// Adds a sample and re-estimates the offset from the window's smallest round trip.
    /// A sample whose local clock ran backwards during the round trip is ignored.
    pub fn record(&self, sample: ClockSample) {
        if sample.local_after_us < sample.local_before_us {
            return;
        }
        let mut samples = self.samples.lock();
        if let Some(best) = best_of(&samples) {
            let tolerance = (best.round_trip_us() + sample.round_trip_us()) / 2 + STEP_TOLERANCE_US;
            if best.offset_us().abs_diff(sample.offset_us()) > tolerance {
                // A clock was stepped: the old samples describe a clock that no longer exists.
                samples.clear();
            }
        }
        if samples.len() == SAMPLE_WINDOW {
            samples.pop_front();
        }
        samples.push_back(sample);
        if let Some(best) = best_of(&samples) {
            self.offset_us.store(best.offset_us(), Ordering::Relaxed);
        }
    }
}

/// Slack allowed when comparing two samples (scheduling noise, clocks of ms resolution).
const STEP_TOLERANCE_US: u64 = 2_000;

/// The sample with the smallest round trip; the newest among equals.
fn best_of(samples: &VecDeque<ClockSample>) -> Option<&ClockSample> {
    samples.iter().rev().min_by_key(|s| s.round_trip_us())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_comes_from_the_fastest_round_trip() {
        let local = Arc::new(ManualClock::new(1_000));
        let clock = ClusterClock::new(local.clone());
        // Server is 5 s ahead; a slow sample with an asymmetric delay would say 5,040.
        clock.record(sample(1_000, 6_080, 1_100));
        clock.record(sample(2_000, 7_001, 2_002));
        assert_eq!(clock.offset_ms(), 5_000);
        assert_eq!(clock.now_ms(), 6_000);
        assert!(clock.is_synchronized());
    }

    /// A sample from millisecond stamps.
    fn sample(local_before_ms: u64, server_ms: u64, local_after_ms: u64) -> ClockSample {
        ClockSample {
            local_before_us: local_before_ms * 1_000,
            server_us: server_ms * 1_000,
            local_after_us: local_after_ms * 1_000,
        }
    }

    #[test]
    fn microsecond_samples_do_not_round_the_offset_up() {
        let clock = ClusterClock::new(Arc::new(ManualClock::new(0)));
        // Server and local agree; the reply was stamped just after a millisecond boundary.
        clock.record(ClockSample {
            local_before_us: 1_000_900,
            server_us: 1_001_000,
            local_after_us: 1_001_100,
        });
        assert_eq!(clock.offset_ms(), 0);
        assert_eq!(clock.now_us(), 0);
    }

    #[test]
    fn among_equally_fast_samples_the_newest_wins() {
        let clock = ClusterClock::new(Arc::new(ManualClock::new(0)));
        assert!(!clock.is_synchronized());
        clock.record(sample(1_000, 1_501, 1_002));
        clock.record(sample(2_000, 2_502, 2_002));
        assert_eq!(clock.offset_ms(), 501);
    }

    #[test]
    fn a_stepped_clock_restarts_the_window() {
        let clock = ClusterClock::new(Arc::new(ManualClock::new(0)));
        clock.record(sample(1_000, 1_000, 1_000));
        // Slower, and irreconcilable with the first: the local clock jumped back 3 s.
        clock.record(sample(2_000, 5_005, 2_010));
        assert_eq!(clock.offset_ms(), 3_000);
        // A slower sample that agrees with the best within their round trips does not.
        clock.record(sample(3_000, 6_010, 3_020));
        assert_eq!(clock.offset_ms(), 3_000);
    }

    #[test]
    fn a_sample_whose_local_clock_ran_backwards_is_ignored() {
        let clock = ClusterClock::new(Arc::new(ManualClock::new(0)));
        clock.record(sample(2_000, 9_000, 1_000));
        assert!(!clock.is_synchronized());
        assert_eq!(clock.offset_ms(), 0);
    }
}
