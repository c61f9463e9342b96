//! Store availability: log once per state change, not once per failed call, and back off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use delayq_storage::StorageError;

/// Tracks whether the task store answers, so that an outage is logged when it starts and
/// when it ends instead of on every failed call.
#[derive(Debug)]
pub(crate) struct StoreHealth {
    available: AtomicBool,
}

impl StoreHealth {
    pub(crate) fn new() -> Self {
        StoreHealth {
            available: AtomicBool::new(true),
        }
    }

    /// Records a successful call.
    pub(crate) fn ok(&self) {
        if !self.available.swap(true, Ordering::Relaxed) {
            tracing::info!("task store reachable again; catching up");
        }
    }

    /// Records a failed call. Transient failures flip the state (logged once); other errors
    /// are logged every time, since they point at a bug or bad data.
    pub(crate) fn failed(&self, operation: &'static str, error: &StorageError) {
        metrics::counter!("delayq_redis_errors_total").increment(1);
        if error.is_transient() {
            if self.available.swap(false, Ordering::Relaxed) {
                tracing::warn!(operation, %error, "task store unreachable; retrying with backoff");
            }
        } else {
            tracing::error!(operation, %error, "task store operation failed");
        }
    }
}

/// Exponential backoff for retrying store calls: 50 ms doubling up to 2 s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryBackoff {
    next: Duration,
}

impl RetryBackoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(2);

    pub(crate) fn new() -> Self {
        RetryBackoff { next: Self::FIRST }
    }

    /// The delay before the next retry; each call doubles the following one.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }

    /// Back to the first delay after a success.
    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}
