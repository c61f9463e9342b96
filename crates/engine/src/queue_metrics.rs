//! The per-queue metrics of firing, registered once per queue and node instead of looked up
//! (label strings built, the registry searched) for every task.
//!
//! The handles are taken when the node first serves the queue, from the `metrics` recorder
//! installed then: install the recorder (as `delayq node` and `delayq_http` do) before
//! starting a scheduler, or its firing metrics go nowhere.

use delayq_storage::QueueName;
use metrics::{Counter, Histogram};

/// The metrics every fire of one queue updates.
pub(crate) struct QueueMetrics {
    /// `delayq_tasks_fired_total{queue}`.
    pub(crate) fired: Counter,
    /// `delayq_fire_lateness_seconds{queue}`.
    pub(crate) lateness: Histogram,
    /// `delayq_handler_duration_seconds{queue}`.
    pub(crate) handler_duration: Histogram,
    /// `delayq_tasks_completed_total{queue,outcome="ok"}`.
    pub(crate) completed_ok: Counter,
    /// `delayq_tasks_completed_total{queue,outcome="retry"}`.
    pub(crate) completed_retry: Counter,
    /// `delayq_tasks_completed_total{queue,outcome="dead"}`.
    pub(crate) completed_dead: Counter,
}

impl QueueMetrics {
    /// Registers the handles of `queue`.
    pub(crate) fn of(queue: &QueueName) -> Self {
        let label = queue.as_str().to_owned();
        let completed = |outcome: &'static str| metrics::counter!("delayq_tasks_completed_total", "queue" => label.clone(), "outcome" => outcome);
        QueueMetrics {
            fired: metrics::counter!("delayq_tasks_fired_total", "queue" => label.clone()),
            lateness: metrics::histogram!("delayq_fire_lateness_seconds", "queue" => label.clone()),
            handler_duration: metrics::histogram!("delayq_handler_duration_seconds", "queue" => label.clone()),
            completed_ok: completed("ok"),
            completed_retry: completed("retry"),
            completed_dead: completed("dead"),
        }
    }
}
