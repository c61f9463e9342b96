//! The cluster clock: Redis `TIME` tracked as an offset from the local clock.
//!
//! # The local clock is monotonic
//! Local time is the machine's wall clock read **once**, when the cluster clock is made, plus
//! the monotonic time elapsed since (`Instant`). A step of the wall clock afterwards (NTP, an
//! operator, a VM resumed) therefore never moves local time, so it never moves cluster time
//! either: it cannot make a task fire early, nor run a lease out. The wall reading only seeds
//! the first estimate; the measured offset to Redis makes up for whatever it was off by.
//!
//! # The offset
//! Each sample is taken around one round trip to Redis: `local_before`, the server's time,
//! `local_after`. Assuming the reply was stamped half-way, the offset is
//! `server - (local_before + rtt / 2)`, good to within `rtt / 2`. The estimator keeps the
//! samples of a recent window and uses the one with the smallest round trip (NTP's
//! "minimum delay" filter): a sample delayed by a busy network or scheduler is simply not
//! chosen. Among equally fast samples the newest wins, so slow drift is followed.
//!
//! Each sample only says "the offset lies within `rtt / 2` of this value", and that holds by
//! causality (the server read its time after the request left and before the reply came
//! back), so no slow or delayed sample can pull the estimate outside its own interval. When a
//! new sample cannot be reconciled with the current best (their intervals do not overlap,
//! even with a little slack), the offset itself changed: with a monotonic local clock that
//! means the *server's* clock was stepped, a failover reached a server with another clock, or
//! this process was suspended (the monotonic clock does not count a suspended VM). The new
//! sample is the truth in each case, so the window restarts from it instead of trusting the
//! old ones for another 16 heartbeats.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// The machine's two clocks, as a seam: tests substitute a skewed, stepping or manual one.
///
/// The [`ClusterClock`] reads [`LocalClock::wall_us`] once, to anchor
/// [`LocalClock::monotonic_us`], and only the monotonic reading after that.
pub trait LocalClock: Send + Sync + 'static {
    /// The wall clock, in microseconds since the Unix epoch. It may step at any time.
    fn wall_us(&self) -> u64;

    /// A monotonic reading, in microseconds since an arbitrary origin: it never steps and
    /// never goes back (`Instant`).
    fn monotonic_us(&self) -> u64;

    /// The wall clock, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.wall_us() / 1_000
    }
}

/// The origin of [`SystemClock::monotonic_us`]: the first time anybody asked.
static MONOTONIC_ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The machine's clocks: `SystemTime` for the wall clock, `Instant` for the monotonic one.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl LocalClock for SystemClock {
    fn wall_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_micros() as u64)
            .unwrap_or(0)
    }

    fn monotonic_us(&self) -> u64 {
        MONOTONIC_ORIGIN.elapsed().as_micros() as u64
    }
}

/// The system clock shifted by a fixed amount: a machine whose clock is wrong.
#[derive(Debug, Clone, Copy)]
pub struct SkewedClock {
    /// Milliseconds added to the system wall clock (negative: behind).
    pub skew_ms: i64,
}

impl LocalClock for SkewedClock {
    fn wall_us(&self) -> u64 {
        SystemClock
            .wall_us()
            .saturating_add_signed(self.skew_ms.saturating_mul(1_000))
    }

    fn monotonic_us(&self) -> u64 {
        SystemClock.monotonic_us()
    }
}

/// The system clock with a wall clock that a test steps, as NTP or an operator would, while
/// its monotonic clock goes on undisturbed.
///
/// ```
/// use std::sync::Arc;
/// use delayq_coordinator::{ClusterClock, LocalClock, SteppingClock};
///
/// let machine = Arc::new(SteppingClock::default());
/// let clock = ClusterClock::new(machine.clone());
/// let before = clock.now_ms();
/// machine.step(5_000);
/// assert!(machine.now_ms() >= before + 5_000);
/// assert!(clock.now_ms() < before + 1_000, "the cluster clock did not jump");
/// ```
#[derive(Debug, Default)]
pub struct SteppingClock {
    step_us: AtomicI64,
}

impl SteppingClock {
    /// Steps the wall clock by `delta_ms` (negative: back), on top of earlier steps.
    pub fn step(&self, delta_ms: i64) {
        self.step_us
            .fetch_add(delta_ms.saturating_mul(1_000), Ordering::SeqCst);
    }
}

impl LocalClock for SteppingClock {
    fn wall_us(&self) -> u64 {
        SystemClock
            .wall_us()
            .saturating_add_signed(self.step_us.load(Ordering::SeqCst))
    }

    fn monotonic_us(&self) -> u64 {
        SystemClock.monotonic_us()
    }
}

/// A clock that only moves when told to (for the memory backend's tests). Both readings are
/// the value set, so moving it moves the cluster time read through it; setting it back is
/// allowed, for tests, although no real monotonic clock does that.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        ManualClock {
            now_ms: AtomicU64::new(now_ms),
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
    fn wall_us(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst).saturating_mul(1_000)
    }

    fn monotonic_us(&self) -> u64 {
        self.wall_us()
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
    /// `wall - monotonic` when the clock was made: local time is `monotonic + anchor`.
    anchor_us: i64,
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
    /// A clock over `local`, anchored to its wall clock now, with no offset yet (until the
    /// first sample).
    pub fn new(local: Arc<dyn LocalClock>) -> Self {
        let monotonic_us = local.monotonic_us() as i64;
        let anchor_us = (local.wall_us() as i64).saturating_sub(monotonic_us);
        ClusterClock {
            local,
            anchor_us,
            offset_us: AtomicI64::new(0),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLE_WINDOW)),
        }
    }

    /// A clock that is the system clock (offset 0 until samples say otherwise).
    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock))
    }

    /// Local time, in milliseconds: the wall clock at the anchor plus the monotonic time
    /// since (steps of the wall clock since the anchor do not show).
    pub fn local_now_ms(&self) -> u64 {
        self.local_now_us() / 1_000
    }

    /// Local time, in microseconds (see [`ClusterClock::local_now_ms`]).
    pub fn local_now_us(&self) -> u64 {
        self.local
            .monotonic_us()
            .saturating_add_signed(self.anchor_us)
    }

    /// Now on the cluster clock, in milliseconds since the epoch (rounded down).
    pub fn now_ms(&self) -> u64 {
        self.now_us() / 1_000
    }

    /// Now on the cluster clock, in microseconds since the epoch.
    pub fn now_us(&self) -> u64 {
        self.local_now_us()
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
    /// A sample whose local clock ran backwards during the round trip is ignored (only a
    /// manual test clock can do that).
    pub fn record(&self, sample: ClockSample) {
        if sample.local_after_us < sample.local_before_us {
            return;
        }
        let mut samples = self.samples.lock();
        if let Some(best) = best_of(&samples) {
            let tolerance = (best.round_trip_us() + sample.round_trip_us()) / 2 + STEP_TOLERANCE_US;
            if best.offset_us().abs_diff(sample.offset_us()) > tolerance {
                // The offset changed (the server's clock stepped, another server answers, or
                // this process was suspended): the old samples describe a past offset.
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

    /// A machine whose wall and monotonic clocks a test moves separately.
    #[derive(Default)]
    struct Machine {
        wall_us: AtomicU64,
        monotonic_us: AtomicU64,
    }

    impl Machine {
        fn at(wall_ms: u64) -> Arc<Self> {
            let machine = Machine::default();
            machine.wall_us.store(wall_ms * 1_000, Ordering::SeqCst);
            machine.monotonic_us.store(42_000_000, Ordering::SeqCst);
            Arc::new(machine)
        }

        /// `ms` pass: both clocks move.
        fn pass(&self, ms: u64) {
            self.wall_us.fetch_add(ms * 1_000, Ordering::SeqCst);
            self.monotonic_us.fetch_add(ms * 1_000, Ordering::SeqCst);
        }

        /// The wall clock is stepped by `ms` (NTP); the monotonic clock is not.
        fn step_wall(&self, ms: i64) {
            let stepped = self
                .wall_us
                .load(Ordering::SeqCst)
                .saturating_add_signed(ms * 1_000);
            self.wall_us.store(stepped, Ordering::SeqCst);
        }
    }

    impl LocalClock for Machine {
        fn wall_us(&self) -> u64 {
            self.wall_us.load(Ordering::SeqCst)
        }

        fn monotonic_us(&self) -> u64 {
            self.monotonic_us.load(Ordering::SeqCst)
        }
    }

    /// One round trip of `rtt_ms` to a server whose clock is `server_ahead_ms` ahead of the
    /// machine's true time, measured through `clock` as the coordinator does.
    fn round_trip(clock: &ClusterClock, machine: &Machine, true_ms: u64, server_ahead_ms: u64) {
        let local_before_us = clock.local_now_us();
        machine.pass(1);
        let server_us = (true_ms + 1 + server_ahead_ms) * 1_000;
        machine.pass(1);
        clock.record(ClockSample {
            local_before_us,
            server_us,
            local_after_us: clock.local_now_us(),
        });
    }

    #[test]
    fn a_step_of_the_wall_clock_moves_neither_local_nor_cluster_time() {
        let machine = Machine::at(1_000_000);
        let clock = ClusterClock::new(machine.clone());
        round_trip(&clock, &machine, 1_000_000, 250);
        assert_eq!(clock.offset_ms(), 250);
        let (local, cluster) = (clock.local_now_us(), clock.now_us());

        machine.step_wall(5_000);
        assert_eq!(clock.local_now_us(), local, "a forward step is not seen");
        assert_eq!(clock.now_us(), cluster);
        machine.step_wall(-60_000);
        assert_eq!(clock.now_us(), cluster, "nor a backward one");

        machine.pass(100);
        assert_eq!(clock.now_us(), cluster + 100_000, "time still passes");
    }

    #[test]
    fn samples_taken_after_a_wall_step_keep_the_offset() {
        let machine = Machine::at(1_000_000);
        let clock = ClusterClock::new(machine.clone());
        round_trip(&clock, &machine, 1_000_000, 250);
        let cluster = clock.now_us();
        machine.step_wall(5_000);
        // Heartbeats after the step measure the same offset: nothing restarts, nothing jumps.
        for beat in 0..20 {
            machine.pass(100);
            round_trip(&clock, &machine, 1_000_102 + beat * 102, 250);
            assert_eq!(clock.offset_ms(), 250);
        }
        assert_eq!(clock.now_us(), cluster + 20 * 102 * 1_000);
    }

    #[test]
    fn a_step_of_the_server_clock_is_followed_at_once() {
        let machine = Machine::at(1_000_000);
        let clock = ClusterClock::new(machine.clone());
        round_trip(&clock, &machine, 1_000_000, 0);
        machine.pass(100);
        // The server's clock (cluster time by definition) jumped 3 s ahead.
        round_trip(&clock, &machine, 1_000_102, 3_000);
        assert_eq!(clock.offset_ms(), 3_000);
    }

    #[test]
    fn before_any_sample_local_time_is_the_wall_clock_at_the_anchor() {
        let machine = Machine::at(1_700_000_000_000);
        let clock = ClusterClock::new(machine.clone());
        assert!(!clock.is_synchronized());
        assert_eq!(clock.now_ms(), 1_700_000_000_000);
        machine.pass(7);
        assert_eq!(clock.now_ms(), 1_700_000_000_007);
    }

    #[test]
    fn a_sample_whose_local_clock_ran_backwards_is_ignored() {
        let clock = ClusterClock::new(Arc::new(ManualClock::new(0)));
        clock.record(sample(2_000, 9_000, 1_000));
        assert!(!clock.is_synchronized());
        assert_eq!(clock.offset_ms(), 0);
    }
}
