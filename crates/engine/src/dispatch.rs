//! Running one claimed task: the handler under a timeout with its panic caught, the lease
//! renewed while it runs, then ack, retry with backoff, or dead-letter.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::{AbortHandle, Abortable, Aborted};
use futures::FutureExt;

use delayq_storage::{AckOutcome, ClaimedTask, FailAction, FailOutcome, LeaseToken, StorageError};
use rand::Rng;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::handler::ResourceExhausted;
use crate::health::RetryBackoff;
use crate::runtime::{next_run_number, QueueRuntime, RunningTask, Runtime};
use crate::task::Task;

/// The slots handlers hold: those a claim took for its tasks, or one task's share of them.
pub(crate) struct Slots {
    /// Of the queue's `concurrency`: held until the handler is done and the task has a
    /// settling place (see [`QueueRuntime::settling`]).
    pub(crate) queue: OwnedSemaphorePermit,
    /// Of the node's `node.max_running` ([`Runtime::running_slots`]): held while the
    /// handler runs.
    pub(crate) node: OwnedSemaphorePermit,
    /// Of the queue's `global_concurrency`, when it has one: held while the handler runs.
    pub(crate) global: Option<OwnedSemaphorePermit>,
}

impl Slots {
    /// One task's slots, taken out of a claim's; `None` when the queue's or the node's ran out.
    pub(crate) fn split_one(&mut self) -> Option<Slots> {
        let queue = self.queue.split(1)?;
        let node = self.node.split(1)?;
        let global = match self.global.as_mut() {
            // Never more tasks than slots (the claim asked for as many); should that ever
            // change, a task runs rather than waits a lease in flight.
            Some(global) => global.split(1),
            None => None,
        };
        Some(Slots {
            queue,
            node,
            global,
        })
    }
}

/// Starts running `claimed` on the queue's handler, holding `slots` (see [`Slots`]).
pub(crate) fn spawn_execution(
    runtime: Arc<Runtime>,
    queue: Arc<QueueRuntime>,
    claimed: ClaimedTask,
    slots: Slots,
) {
    // Debug level: at info, formatting a span's fields for every fire cost a tenth of the
    // node's CPU. The events of this module name the task's queue and id themselves.
    let span = tracing::debug_span!(
        "task",
        queue = %queue.name,
        id = %claimed.id,
        attempt = claimed.attempt,
        generation = claimed.generation,
    );
    let executions = runtime.executions.clone();
    executions.spawn(execute(runtime, queue, claimed, slots).instrument(span));
}

/// How a handler run ended.
enum RunOutcome {
    Succeeded,
    Failed(String),
    /// The handler could not start for lack of the node's resources ([`ResourceExhausted`]):
    /// the task goes back without spending its attempt.
    NoResources(String),
    /// Aborted by shutdown or a simulated crash: nothing to settle here.
    Aborted,
}

async fn execute(
    runtime: Arc<Runtime>,
    queue: Arc<QueueRuntime>,
    claimed: ClaimedTask,
    slots: Slots,
) {
    let Slots {
        queue: slot,
        node,
        global,
    } = slots;
    if runtime.killed.load(std::sync::atomic::Ordering::Relaxed) {
        // A crashed node runs nothing more; the lease expires and another node takes over.
        return;
    }
    let token = claimed.token.clone();
    let task = Task {
        queue: queue.name.as_str().to_owned(),
        id: claimed.id.as_str().to_owned(),
        due_ms: claimed.due_ms,
        fired_ms: runtime.clock.now_ms(),
        attempt: claimed.attempt,
        generation: claimed.generation,
        payload: claimed.payload.clone(),
        node: runtime.node_id().to_owned(),
    };
    tracing::debug!(
        lateness_ms = task.fired_ms.saturating_sub(task.due_ms),
        "firing"
    );
    if task.attempt == 1 {
        record_tick_fired(&runtime, &task);
    }
    queue
        .metrics
        .fired(task.fired_ms.saturating_sub(task.due_ms));
    let started = std::time::Instant::now();
    // The handler runs inside this task (no task of its own: a fire costs one spawn, not
    // three): its panic is caught here, a timeout or an abort drops it, and the lease
    // renewal is polled beside it until the result is recorded.
    let (handler_abort, handler_registration) = AbortHandle::new_pair();
    let (renewal_abort, renewal_registration) = AbortHandle::new_pair();
    let finished = Arc::new(AtomicBool::new(false));
    let run = next_run_number(&runtime);
    runtime.running.lock().insert(
        run,
        RunningTask {
            token: token.clone(),
            abort: handler_abort,
            renewal: renewal_abort,
            finished: finished.clone(),
        },
    );
    let handler = queue.handler.clone();
    let handling = Abortable::new(
        AssertUnwindSafe(async move { handler.handle(task).await }).catch_unwind(),
        handler_registration,
    );
    let mut renewal = Renewal::new(Abortable::new(
        renew_lease(runtime.clone(), token.clone()),
        renewal_registration,
    ));
    let timeout = queue.settings.timeout;
    let ran = renewal
        .beside(tokio::time::timeout(timeout, handling))
        .await;
    finished.store(true, Ordering::Release);
    let outcome = match ran {
        Ok(Ok(Ok(Ok(())))) => RunOutcome::Succeeded,
        Ok(Ok(Ok(Err(error)))) if ResourceExhausted::is_cause_of(&*error) => {
            RunOutcome::NoResources(error.to_string())
        }
        Ok(Ok(Ok(Err(error)))) => RunOutcome::Failed(error.to_string()),
        Ok(Ok(Err(panic))) => {
            RunOutcome::Failed(format!("handler panicked: {}", panic_message(&*panic)))
        }
        Ok(Err(Aborted)) => RunOutcome::Aborted,
        // Dropping the handler's future stopped it.
        Err(_) => RunOutcome::Failed(format!(
            "handler timed out after {}",
            humantime::format_duration(timeout)
        )),
    };
    // The handler runs no more: its cluster-wide and node-wide slots are free for the next
    // one at once.
    drop(global);
    drop(node);
    if matches!(outcome, RunOutcome::Succeeded | RunOutcome::Failed(_)) {
        queue.metrics.handler_ran(started.elapsed().as_secs_f64());
    }
    // The handler is done: its slot goes to the next task once this one has a settling
    // place, not after the ack's round trip (claims then come in bigger batches).
    let _settling = renewal
        .beside(queue.settling.clone().acquire_owned())
        .await
        .ok();
    drop(slot);
    // Shutdown may have released the task already; then it is not ours to settle.
    if runtime.running.lock().remove(&run).is_some() {
        // The lease stays renewed while the result is recorded (retried through an outage).
        let settling = async {
            match outcome {
                RunOutcome::Succeeded => settle_success(&runtime, &queue, &token).await,
                RunOutcome::Failed(error) => {
                    let action = failure_action(&runtime, &queue, claimed.attempt);
                    settle_failure(&runtime, &queue, &claimed, &error, action).await;
                }
                RunOutcome::NoResources(error) => {
                    crate::resources::record(&queue.name, &error);
                    let due_ms = crate::resources::requeue_due_ms(runtime.clock.now_ms());
                    settle_failure(
                        &runtime,
                        &queue,
                        &claimed,
                        &error,
                        FailAction::RequeueAt(due_ms),
                    )
                    .await;
                }
                RunOutcome::Aborted => {}
            }
        };
        renewal.beside(settling).await;
    }
}

/// The lease renewal of one execution, polled beside whatever the execution awaits (the
/// handler, a settling place, the ack) until the execution ends: no task of its own.
struct Renewal<F> {
    future: Pin<Box<F>>,
    /// False once it ended: the lease was lost, or shutdown aborted it.
    going: bool,
}

impl<F: Future> Renewal<F> {
    fn new(future: F) -> Self {
        Renewal {
            future: Box::pin(future),
            going: true,
        }
    }

    /// Awaits `work` while the renewal goes on.
    async fn beside<T>(&mut self, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                biased;
                done = &mut work => return done,
                _ = &mut self.future, if self.going => self.going = false,
            }
        }
    }
}

/// A task whose id is a recurring tick (`<name>@<tick_ms>`): tell its schedule when it fired
/// (`delayq recurring get` shows it), in the background, best effort.
fn record_tick_fired(runtime: &Arc<Runtime>, task: &Task) {
    let Some((name, tick_ms)) = crate::recurring::parse_tick_id(&task.id) else {
        return;
    };
    let name = name.to_owned();
    let store = runtime.store.clone();
    let fired_ms = task.fired_ms;
    tokio::spawn(async move {
        if let Err(error) = store.recurring_fired(&name, tick_ms, fired_ms).await {
            tracing::debug!(schedule = %name, %error, "could not record a tick's fire");
        }
    });
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// Extends the lease every third of its length while the handler runs.
async fn renew_lease(runtime: Arc<Runtime>, token: LeaseToken) {
    let lease = runtime.config.engine.lease;
    let every = runtime.config.engine.lease_renewal_period();
    loop {
        tokio::time::sleep(every).await;
        let deadline = runtime.clock.now_ms() + lease.as_millis() as u64;
        match runtime.store.renew(&token, deadline).await {
            Ok(()) => runtime.health.ok(),
            Err(StorageError::StaleLease { .. }) => {
                tracing::warn!(
                    queue = %token.partition.queue,
                    id = %token.id,
                    "lease lost while the handler runs; the task may be delivered again"
                );
                return;
            }
            Err(error) => runtime.health.failed("renew", &error),
        }
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
