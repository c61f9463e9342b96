//! Writes of the firing path that Redis applied on the master but whose `WAIT` saw fewer
//! than `redis.wait_replicas` replicas within `redis.wait_timeout` (today: acks).
//!
//! Such a write is done as far as the node is concerned: the task is settled on the master,
//! and its handler and settling slots go to the next task at once. A failover before a replica
//! copies it could lose it; the task then runs again (at-least-once). Each one is counted in
//! `delayq_writes_unconfirmed_total{operation}` and reported in a warning at most once per
//! [`LOG_PERIOD`](crate::throttled::LOG_PERIOD), with the count since the previous one (the
//! first of a burst at once, the rest of it within a period).

use crate::throttled::ThrottledLog;

/// The unconfirmed writes not logged yet, by operation, with the latest `(wanted,
/// confirmed)` replica counts.
static LOG: ThrottledLog<&'static str, (u32, u32)> = ThrottledLog::new(emit);

/// Counts one write of `operation` applied on the master but not confirmed by the
/// replicas (`wanted` asked, `confirmed` answered), and logs it rate-limited.
pub(crate) fn record(operation: &'static str, wanted: u32, confirmed: u32) {
    metrics::counter!("delayq_writes_unconfirmed_total", "operation" => operation).increment(1);
    LOG.record(operation, (wanted, confirmed));
}

fn emit(
    operation: &&'static str,
    count: u64,
    since_last_ms: Option<u64>,
    &(wanted, confirmed): &(u32, u32),
) {
    tracing::warn!(
        operation = *operation,
        unconfirmed = count,
        since_last_ms,
        wanted_replicas = wanted,
        confirmed_replicas = confirmed,
        "writes applied on the Redis master but not confirmed by redis.wait_replicas \
         replicas within redis.wait_timeout; they count as done, and a failover now could \
         lose them (those tasks would run again)"
    );
}
