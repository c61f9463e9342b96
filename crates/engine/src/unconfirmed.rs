//! Writes of the firing path that Redis applied on the master but whose `WAIT` saw fewer
//! than `redis.wait_replicas` replicas within `redis.wait_timeout` (today: acks).
//!
//! Such a write is done as far as the node is concerned: the task is settled on the master,
//! and its handler and settling slots go to the next task at once. A failover before a replica
//! copies it could lose it; the task then runs again (at-least-once). Each one is counted in
//! `delayq_writes_unconfirmed_total{operation}` and reported in a warning at most once per
//! [`LOG_PERIOD`], with the count since the previous one (the first of a burst at once, the
//! rest of it within a period).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// At most one warning per this period.
pub(crate) const LOG_PERIOD: Duration = Duration::from_secs(10);

/// The unconfirmed writes not logged yet, process-wide (like the metric).
static LOG: Mutex<UnconfirmedLog> = Mutex::new(UnconfirmedLog {
    last_logged: None,
    pending: BTreeMap::new(),
    flush_armed: false,
});

/// What has been logged, and what is still to be.
struct UnconfirmedLog {
    /// When the last warning went out.
    last_logged: Option<Instant>,
    /// Unconfirmed writes since then, by operation.
    pending: BTreeMap<&'static str, u64>,
    /// Whether a task is due to log `pending` once the period is over.
    flush_armed: bool,
}

/// Counts one write of `operation` applied on the master but not confirmed by the
/// replicas (`wanted` asked, `confirmed` answered), and logs it rate-limited.
pub(crate) fn record(operation: &'static str, wanted: u32, confirmed: u32) {
    metrics::counter!("delayq_writes_unconfirmed_total", "operation" => operation).increment(1);
    let now = Instant::now();
    let mut log = LOG.lock();
    *log.pending.entry(operation).or_default() += 1;
    if log.flush_armed {
        return;
    }
    let next = log.last_logged.map(|last| last + LOG_PERIOD);
    match next {
        Some(next) if next > now => {
            log.flush_armed = true;
            drop(log);
            // Outside a runtime (never on the firing path) the count waits for the next one.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    tokio::time::sleep_until(next.into()).await;
                    flush(wanted, confirmed);
                });
            } else {
                LOG.lock().flush_armed = false;
            }
        }
        _ => emit(&mut log, now, wanted, confirmed),
    }
}

/// Logs what is pending once the period is over.
fn flush(wanted: u32, confirmed: u32) {
    let mut log = LOG.lock();
    log.flush_armed = false;
    emit(&mut log, Instant::now(), wanted, confirmed);
}

fn emit(log: &mut UnconfirmedLog, now: Instant, wanted: u32, confirmed: u32) {
    let since_last_ms = log
        .last_logged
        .map(|last| now.duration_since(last).as_millis() as u64);
    for (operation, count) in std::mem::take(&mut log.pending) {
        tracing::warn!(
            operation,
            unconfirmed = count,
            since_last_ms,
            wanted_replicas = wanted,
            confirmed_replicas = confirmed,
            "writes applied on the Redis master but not confirmed by redis.wait_replicas \
             replicas within redis.wait_timeout; they count as done, and a failover now could \
             lose them (those tasks would run again)"
        );
    }
    log.last_logged = Some(now);
}
