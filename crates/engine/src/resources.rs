//! Handlers that could not start for lack of the node's resources ([`ResourceExhausted`]):
//! the task goes back, due again after about [`RESOURCE_RETRY_DELAY`], with its attempt
//! unspent. Each one is counted in `delayq_handler_resource_failures_total{queue}` and warned
//! about at most once per [`LOG_PERIOD`](crate::throttled::LOG_PERIOD) per queue, with the
//! count since the previous warning.
//!
//! [`ResourceExhausted`]: crate::ResourceExhausted

use delayq_storage::QueueName;
use rand::Rng;

use crate::handler::RESOURCE_RETRY_DELAY;
use crate::throttled::ThrottledLog;

/// The failures not logged yet, by queue, with the latest error.
static LOG: ThrottledLog<String, String> = ThrottledLog::new(emit);

/// Counts one handler of `queue` that could not start (`error` says why), and warns about
/// it rate-limited.
pub(crate) fn record(queue: &QueueName, error: &str) {
    let queue = queue.as_str().to_owned();
    metrics::counter!("delayq_handler_resource_failures_total", "queue" => queue.clone())
        .increment(1);
    LOG.record(queue, error.to_owned());
}

/// When a task put back for lack of resources is due again: [`RESOURCE_RETRY_DELAY`] after
/// `now_ms`, plus up to a quarter of it at random.
pub(crate) fn requeue_due_ms(now_ms: u64) -> u64 {
    let delay = RESOURCE_RETRY_DELAY.as_millis() as u64;
    now_ms + delay + rand::rng().random_range(0..=delay / 4)
}

fn emit(queue: &String, count: u64, since_last_ms: Option<u64>, error: &String) {
    tracing::warn!(
        %queue,
        failures = count,
        since_last_ms,
        last_error = %error,
        "handlers could not start for lack of resources on this node (open files, processes, \
         memory); their tasks are put back without spending an attempt and retried in about \
         a second"
    );
}
