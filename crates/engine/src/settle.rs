//! Recording how a handler run ended: ack, retry with backoff, or dead-letter, each retried
//! through transient errors while the lease would hold.

use delayq_storage::{AckOutcome, ClaimedTask, FailAction, FailOutcome, LeaseToken, StorageError};
use rand::Rng;

use crate::health::RetryBackoff;
use crate::runtime::{QueueRuntime, Runtime};

/// How a handler run ended.
pub(crate) enum RunOutcome {
    Succeeded,
    Failed(String),
    /// Failed, and asked to be retried after `delay` rather than on the backoff
    /// ([`RetryAfter`](crate::handler::RetryAfter)).
    RetryAfter {
        error: String,
        delay: std::time::Duration,
    },
    /// The handler could not start for lack of the node's resources
    /// ([`ResourceExhausted`](crate::handler::ResourceExhausted)): the task goes back without
    /// spending its attempt.
    NoResources(String),
    /// Aborted by shutdown or a simulated crash: nothing to settle here.
    Aborted,
}

/// Records `outcome` for `claimed` (nothing for [`RunOutcome::Aborted`]).
pub(crate) async fn settle(
    runtime: &Runtime,
    queue: &QueueRuntime,
    claimed: &ClaimedTask,
    outcome: RunOutcome,
) {
    settle_outcome(runtime, queue, claimed, outcome).await;
    if queue.flow_limits.is_some() && claimed.id.flow_key().is_some() {
        // The end of a keyed task may have let its key's next held-back task back into
        // the pending index: the partition claims again now rather than at its next look.
        runtime.claim_again_if_held_back(&claimed.token.partition);
    }
}

/// Records `outcome` for `claimed` in the store.
async fn settle_outcome(
    runtime: &Runtime,
    queue: &QueueRuntime,
    claimed: &ClaimedTask,
    outcome: RunOutcome,
) {
    match outcome {
        RunOutcome::Succeeded => settle_success(runtime, queue, &claimed.token).await,
        RunOutcome::Failed(error) => {
            let action = failure_action(runtime, queue, claimed.attempt);
            settle_failure(runtime, queue, claimed, &error, action).await;
        }
        RunOutcome::RetryAfter { error, delay } => {
            let action = asked_retry_action(runtime, queue, claimed.attempt, delay);
            settle_failure(runtime, queue, claimed, &error, action).await;
        }
        RunOutcome::NoResources(error) => {
            crate::resources::record(&queue.name, &error);
            let due_ms = crate::resources::requeue_due_ms(runtime.clock.now_ms());
            settle_failure(
                runtime,
                queue,
                claimed,
                &error,
                FailAction::RequeueAt(due_ms),
            )
            .await;
        }
        RunOutcome::Aborted => {}
    }
}

/// Keeps retrying a settling call on transient errors until the lease would have run out
/// anyway (after that another node may already have taken the task back).
async fn with_retries<T, F, Fut>(
    runtime: &Runtime,
    operation: &'static str,
    token: &LeaseToken,
    mut call: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StorageError>>,
{
    let give_up_at = runtime.clock.now_ms() + runtime.config.engine.lease.as_millis() as u64;
    let mut backoff = RetryBackoff::new();
    loop {
        match call().await {
            Ok(value) => {
                runtime.health.ok();
                return Some(value);
            }
            Err(StorageError::StaleLease { .. }) => {
                tracing::warn!(
                    operation,
                    queue = %token.partition.queue,
                    id = %token.id,
                    "lease lost before the result was recorded; the task may be delivered again"
                );
                return None;
            }
            Err(error) if error.is_transient() && runtime.clock.now_ms() < give_up_at => {
                runtime.health.failed(operation, &error);
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(error) => {
                runtime.health.failed(operation, &error);
                return None;
            }
        }
    }
}

/// How an ack ended, as far as this node is concerned.
#[derive(Debug)]
enum Acked {
    /// Applied (and, with `redis.wait_replicas`, confirmed by the replicas).
    Confirmed(AckOutcome),
    /// Applied on the master, but too few replicas confirmed it within `redis.wait_timeout`.
    Unconfirmed {
        /// `redis.wait_replicas`.
        wanted: u32,
        /// The replicas that confirmed in time.
        confirmed: u32,
    },
}

async fn settle_success(runtime: &Runtime, queue: &QueueRuntime, token: &LeaseToken) {
    let acked = with_retries(runtime, "ack", token, || async {
        match runtime.store.ack(token).await {
            Ok(outcome) => Ok(Acked::Confirmed(outcome)),
            // The ack is on the master (a `ReplicationTimeout` of an ack comes only after
            // the script applied it): done here, not retried while the lease holds, which
            // would keep this settling slot (and, once those run out, the handler slots)
            // through a replica outage. A failover could still lose it: at-least-once.
            Err(StorageError::ReplicationTimeout {
                wanted, confirmed, ..
            }) => Ok(Acked::Unconfirmed { wanted, confirmed }),
            Err(error) => Err(error),
        }
    })
    .await;
    match acked {
        Some(Acked::Confirmed(outcome)) => {
            queue.metrics.completed("ok");
            tracing::debug!(?outcome, "acknowledged");
        }
        Some(Acked::Unconfirmed { wanted, confirmed }) => {
            queue.metrics.completed("ok");
            crate::unconfirmed::record("ack", wanted, confirmed);
            tracing::debug!(
                wanted_replicas = wanted,
                confirmed_replicas = confirmed,
                "acknowledged on the master, not confirmed by the replicas"
            );
        }
        None => {}
    }
}

/// What follows a failed `attempt`: a retry after the queue's backoff, or the dead letters
/// once `max_attempts` ran out.
fn failure_action(runtime: &Runtime, queue: &QueueRuntime, attempt: u32) -> FailAction {
    if attempt >= queue.settings.max_attempts {
        FailAction::DeadLetter
    } else {
        let jitter: f64 = rand::rng().random();
        let delay = queue.settings.backoff_delay(attempt, jitter);
        FailAction::RetryAt(runtime.clock.now_ms() + delay.as_millis() as u64)
    }
}

/// What follows a failed `attempt` whose handler asked to be retried after `delay`: a retry
/// then, capped at the queue's `backoff.max`, or the dead letters once `max_attempts` ran out
/// (the attempt counts).
fn asked_retry_action(
    runtime: &Runtime,
    queue: &QueueRuntime,
    attempt: u32,
    delay: std::time::Duration,
) -> FailAction {
    if attempt >= queue.settings.max_attempts {
        FailAction::DeadLetter
    } else {
        let delay = delay.min(queue.settings.backoff.max);
        FailAction::RetryAt(runtime.clock.now_ms() + delay.as_millis() as u64)
    }
}

async fn settle_failure(
    runtime: &Runtime,
    queue: &QueueRuntime,
    claimed: &ClaimedTask,
    error: &str,
    action: FailAction,
) {
    let attempt = claimed.attempt;
    let (name, id) = (&claimed.token.partition.queue, &claimed.token.id);
    let outcome = with_retries(runtime, "fail", &claimed.token, || {
        runtime.store.fail(&claimed.token, error, action)
    })
    .await;
    match outcome {
        Some(FailOutcome::Retrying { due_ms, .. })
            if matches!(action, FailAction::RequeueAt(_)) =>
        {
            // Warned about rate-limited by `resources::record`: these come in floods.
            tracing::debug!(
                queue = %name,
                %id,
                error,
                attempt,
                retry_at_ms = due_ms,
                "handler could not start for lack of resources; put back, attempt not spent"
            );
            runtime.arm_if_owned(&claimed.token.partition, due_ms);
        }
        Some(FailOutcome::Retrying { attempt, due_ms }) => {
            queue.metrics.completed("retry");
            tracing::warn!(
                queue = %name,
                %id,
                error,
                next_attempt = attempt,
                retry_at_ms = due_ms,
                "handler failed; will retry"
            );
            runtime.arm_if_owned(&claimed.token.partition, due_ms);
        }
        Some(FailOutcome::DeadLettered) => {
            queue.metrics.completed("dead");
            tracing::error!(
                queue = %name,
                %id,
                error,
                attempts = attempt,
                "handler failed; attempts exhausted, dead-lettered"
            );
        }
        Some(FailOutcome::Superseded) => {
            tracing::info!(
                queue = %name,
                %id,
                error,
                "handler failed, but the task was rescheduled or cancelled meanwhile"
            );
        }
        None => {}
    }
}
