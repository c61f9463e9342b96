//! The per-queue metrics of firing: `delayq_tasks_fired_total`, `delayq_fire_lateness_seconds`,
//! `delayq_handler_duration_seconds` and `delayq_tasks_completed_total{outcome}`.
//!
//! Looked up in the `metrics` recorder at every update, not registered once: the recorder
//! may be installed after the scheduler started (`delayq node --listen` and the documented
//! `delayq_http` setup install it then), and a handle taken before would count nowhere.

use delayq_storage::QueueName;

/// The firing metrics of one queue: their names and labels in one place. The label is
/// cloned into every update (the `metrics` key owns it), as before this type.
pub(crate) struct QueueMetrics {
    queue: String,
}

impl QueueMetrics {
    /// The metrics of `queue`.
    pub(crate) fn of(queue: &QueueName) -> Self {
        QueueMetrics {
            queue: queue.as_str().to_owned(),
        }
    }

    /// A task fired `lateness_ms` after its due time.
    pub(crate) fn fired(&self, lateness_ms: u64) {
        metrics::counter!("delayq_tasks_fired_total", "queue" => self.queue.clone()).increment(1);
        metrics::histogram!("delayq_fire_lateness_seconds", "queue" => self.queue.clone())
            .record(lateness_ms as f64 / 1000.0);
    }

    /// A handler ran for `seconds`.
    pub(crate) fn handler_ran(&self, seconds: f64) {
        metrics::histogram!("delayq_handler_duration_seconds", "queue" => self.queue.clone())
            .record(seconds);
    }

    /// An attempt settled with `outcome` (`ok`, `retry`, `dead`).
    pub(crate) fn completed(&self, outcome: &'static str) {
        metrics::counter!("delayq_tasks_completed_total", "queue" => self.queue.clone(), "outcome" => outcome)
            .increment(1);
    }
}
