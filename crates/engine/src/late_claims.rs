//! Claims that came back late. A claim carries the lease deadline its node computed when it
//! sent it; a call that waited out an outage in the connection layer (a Redis restart answers
//! `LOADING` while it loads its AOF), or tasks fetched again from a lost claim's receipt, may
//! come back with less than a renewal period of that lease left, or none. Their handlers would
//! start with a lease the partition's next look takes back (the sweep requeues it) before the
//! first renewal, and the tasks would run twice. So such tasks get a fresh lease before their
//! handlers start.

use delayq_storage::{ClaimBatch, StorageError};
use futures::future::join_all;

use crate::runtime::Runtime;

/// `batch`, claimed with `lease_deadline`: when less than the lease minus one renewal
/// period of it is left, every task's lease is renewed now (one call each, at once); a task
/// whose lease was taken back meanwhile (stale) is left out, as the task is pending again or
/// claimed by someone else, who runs it.
pub(crate) async fn refresh(
    runtime: &Runtime,
    batch: ClaimBatch,
    lease_deadline: u64,
) -> ClaimBatch {
    let engine = &runtime.config.engine;
    let lease = engine.lease.as_millis() as u64;
    let renewal = engine.lease_renewal_period().as_millis() as u64;
    let now = runtime.clock.now_ms();
    if batch.tasks.is_empty() || lease_deadline >= now.saturating_add(lease - renewal.min(lease)) {
        return batch;
    }
    let deadline = now + lease;
    let renewed = join_all(
        batch
            .tasks
            .iter()
            .map(|task| runtime.store.renew(&task.token, deadline)),
    )
    .await;
    let ClaimBatch {
        tasks,
        next_due_ms,
        dead_lettered,
        paused,
        held_back,
    } = batch;
    let claimed = tasks.len();
    let tasks: Vec<_> = tasks
        .into_iter()
        .zip(renewed)
        .filter_map(|(task, renewed)| match renewed {
            Err(StorageError::StaleLease { .. }) => None,
            // Renewed, or the renewal's fate is unknown: run it, as any claimed task.
            _ => Some(task),
        })
        .collect();
    tracing::info!(
        late_ms = now.saturating_sub(lease_deadline.saturating_sub(lease)),
        claimed,
        stale = claimed - tasks.len(),
        "a claim came back late: its leases were renewed before the handlers start"
    );
    ClaimBatch {
        tasks,
        next_due_ms,
        dead_lettered,
        paused,
        held_back,
    }
}
