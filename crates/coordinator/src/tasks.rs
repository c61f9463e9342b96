//! Background tasks owned by a coordinator, and logging that speaks once per state change.

use std::time::Instant;

use parking_lot::Mutex;
use tokio::task::JoinHandle;

/// Tasks that are aborted together, and at the latest when the group is dropped (which is how
/// dropping a coordinator without leaving simulates a crash).
#[derive(Debug, Default)]
pub(crate) struct TaskGroup {
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl TaskGroup {
    /// Adds a running task to the group.
    pub(crate) fn push(&self, handle: JoinHandle<()>) {
        self.handles.lock().push(handle);
    }

    /// Aborts every task without waiting for them to end.
    pub(crate) fn abort_all(&self) {
        for handle in self.handles.lock().drain(..) {
            handle.abort();
        }
    }

    /// Aborts every task and waits until none of them runs any more.
    pub(crate) async fn stop_all(&self) {
        let handles: Vec<_> = self.handles.lock().drain(..).collect();
        for handle in &handles {
            handle.abort();
        }
        for handle in handles {
            // The only error is the cancellation just asked for (or a panic already logged).
            let _ = handle.await;
        }
    }
}

impl Drop for TaskGroup {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// Remembers whether a repeated operation (heartbeat, subscription) is failing, so that an
/// outage is logged once when it starts and once when it ends, not on every attempt.
#[derive(Debug)]
pub(crate) struct Health {
    operation: &'static str,
    failing_since: Option<Instant>,
}

impl Health {
    pub(crate) fn new(operation: &'static str) -> Self {
        Health {
            operation,
            failing_since: None,
        }
    }

    /// Records a failure; warns only on the first one of a streak.
    pub(crate) fn failed(&mut self, node: &str, error: &dyn std::fmt::Display) {
        if self.failing_since.is_none() {
            self.failing_since = Some(Instant::now());
            tracing::warn!(
                node,
                operation = self.operation,
                %error,
                "coordinator operation failing; retrying quietly until it recovers"
            );
        } else {
            tracing::debug!(node, operation = self.operation, %error, "still failing");
        }
    }

    /// Records a success; logs the length of the gap if it ends a streak of failures.
    pub(crate) fn succeeded(&mut self, node: &str) {
        if let Some(since) = self.failing_since.take() {
            tracing::info!(
                node,
                operation = self.operation,
                gap_ms = since.elapsed().as_millis() as u64,
                "coordinator operation recovered"
            );
        }
    }
}

/// Exponential backoff between retries: `min`, `2 min`, `4 min`, ... capped at `max`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: std::time::Duration,
    max: std::time::Duration,
    next: std::time::Duration,
}

impl Backoff {
    pub(crate) fn new(min: std::time::Duration, max: std::time::Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The delay before the next retry.
    pub(crate) fn next_delay(&mut self) -> std::time::Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// Back to the shortest delay (after a success).
    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}
