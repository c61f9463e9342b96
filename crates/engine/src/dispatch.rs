//! Running a claim's tasks: one spawned task per claim drives all its handlers at once (each
//! under the queue's timeout, its panic caught), renews their leases while they run and
//! while their results are recorded, and settles each as it finishes (see [`settle`]).
//!
//! A claim's fires share one tokio task, so they are polled on one worker thread at a time:
//! a handler that computes for long inside `poll` holds back the others of its claim (as it
//! would hold back any task on its thread). Handlers that compute should do so in
//! `tokio::task::spawn_blocking`; the built-in ones only wait.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use futures::future::{AbortHandle, AbortRegistration, Abortable, Aborted, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use delayq_storage::{ClaimedTask, LeaseToken, StorageError, StorageResult};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::handler::{HandlerError, HandlerFuture, ResourceExhausted, RetryAfter};
use crate::runtime::{next_run_number, QueueRuntime, RunningTask, Runtime};
use crate::settle::{settle, RunOutcome};
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

/// Starts running a claim's `fires` on the queue's handler, each holding its [`Slots`]: one
/// spawned task for the whole claim, not one per task.
pub(crate) fn spawn_claim(
    runtime: Arc<Runtime>,
    queue: Arc<QueueRuntime>,
    fires: Vec<(ClaimedTask, Slots)>,
) {
    if fires.is_empty() {
        return;
    }
    let executions = runtime.executions.clone();
    executions.spawn(run_claim(runtime, queue, fires));
}

/// What a handler's future gave: its result, its panic, or its abort.
type Ran = Result<std::thread::Result<Result<(), HandlerError>>, Aborted>;

/// Where one fire of a claim is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Its handler runs.
    Handling,
    /// Its handler is done; its result is being recorded.
    Settling,
    /// Settled (or given up): nothing more to do, no lease to renew.
    Done,
}

/// Where one fire's lease is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lease {
    /// Held; renewed at the claim's next renewal.
    Held,
    /// A renewal is in flight.
    Renewing,
    /// Another claim took the task: never renewed again.
    Lost,
}

/// One fire of a claim, as its driver keeps it.
struct Fire {
    /// Its entry in [`Runtime::running`].
    run: u64,
    stage: Stage,
    lease: Lease,
    /// Its share of the queue's `concurrency`, until its result has a settling place.
    queue_slot: Option<OwnedSemaphorePermit>,
    /// Its shares of `node.max_running` and `global_concurrency`, while its handler runs.
    running_slots: Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)>,
    /// The `task` span (debug level: disabled, and free, unless asked for).
    span: tracing::Span,
}

/// Runs a claim's tasks: starts every handler at once, then, until each task settled, polls
/// the handlers, their settling, the batch's lease renewals (every
/// [`lease_renewal_period`](crate::config::EngineConfig::lease_renewal_period), for each task
/// not settled whose lease still holds) and one timeout for all of them (they started
/// together, so they time out together).
async fn run_claim(
    runtime: Arc<Runtime>,
    queue: Arc<QueueRuntime>,
    batch: Vec<(ClaimedTask, Slots)>,
) {
    if runtime.killed.load(Ordering::Relaxed) {
        // A crashed node runs nothing more; the leases expire and other nodes take over.
        return;
    }
    let (claims, mut fires, handlers) = start(&runtime, &queue, batch);
    let mut handlers = FuturesUnordered::from_iter(handlers);
    let started = Instant::now();
    let timeout = queue.settings.timeout;
    let every = runtime.config.engine.lease_renewal_period();
    let lease = runtime.config.engine.lease.as_millis() as u64;
    let deadline = tokio::time::sleep(timeout);
    let renew_at = tokio::time::sleep(every);
    tokio::pin!(deadline, renew_at);
    let mut settles = FuturesUnordered::new();
    // Boxed (renewals are rare: one per task every third of the lease) for its type.
    let mut renewals: FuturesUnordered<BoxFuture<'_, (usize, StorageResult<()>)>> =
        FuturesUnordered::new();
    let done_handling = |index: usize, outcome: RunOutcome, fires: &mut [Fire]| {
        let fire = &mut fires[index];
        fire.stage = Stage::Settling;
        if let Some(running) = runtime.running.lock().get_mut(&fire.run) {
            running.finished = true;
        }
        // The handler runs no more: its cluster-wide and node-wide slots are free for the
        // next one at once.
        fire.running_slots = None;
        if matches!(
            outcome,
            RunOutcome::Succeeded | RunOutcome::Failed(_) | RunOutcome::RetryAfter { .. }
        ) {
            queue.metrics.handler_ran(started.elapsed().as_secs_f64());
        }
        let slot = fire.queue_slot.take();
        let settling = settle_one(&runtime, &queue, &claims[index], fire.run, slot, outcome);
        settling.map(move |()| index).instrument(fire.span.clone())
    };
    while !handlers.is_empty() || !settles.is_empty() {
        tokio::select! {
            biased;
            Some((index, ran)) = handlers.next(), if !handlers.is_empty() => {
                let outcome = outcome_of(ran);
                settles.push(done_handling(index, outcome, &mut fires));
            }
            Some(index) = settles.next(), if !settles.is_empty() => {
                fires[index].stage = Stage::Done;
            }
            Some((index, renewed)) = renewals.next(), if !renewals.is_empty() => {
                renewed_lease(&runtime, &claims[index].token, &mut fires[index], renewed);
            }
            () = &mut deadline, if !handlers.is_empty() => {
                // Dropping a handler's future stops it.
                handlers.clear();
                let error = format!(
                    "handler timed out after {}",
                    humantime::format_duration(timeout)
                );
                for index in 0..fires.len() {
                    if fires[index].stage == Stage::Handling {
                        let outcome = RunOutcome::Failed(error.clone());
                        settles.push(done_handling(index, outcome, &mut fires));
                    }
                }
            }
            () = &mut renew_at => {
                renew_at.as_mut().reset(tokio::time::Instant::now() + every);
                let deadline_ms = runtime.clock.now_ms() + lease;
                // Shutdown may have given a task back (removed from `running`): not renewed.
                let running = runtime.running.lock();
                for (index, fire) in fires.iter_mut().enumerate() {
                    if fire.stage != Stage::Done
                        && fire.lease == Lease::Held
                        && running.contains_key(&fire.run)
                    {
                        fire.lease = Lease::Renewing;
                        let token = &claims[index].token;
                        let renewal = runtime.store.renew(token, deadline_ms);
                        renewals.push(renewal.map(move |renewed| (index, renewed)).boxed());
                    }
                }
            }
        }
    }
}

/// Builds the claim's tasks, registers them in [`Runtime::running`] (one lock for the
/// claim) and creates their handlers' futures (a panic while creating one is that task's
/// failure).
#[allow(clippy::type_complexity)]
fn start(
    runtime: &Arc<Runtime>,
    queue: &QueueRuntime,
    batch: Vec<(ClaimedTask, Slots)>,
) -> (
    Vec<ClaimedTask>,
    Vec<Fire>,
    Vec<impl std::future::Future<Output = (usize, Ran)>>,
) {
    let fired_ms = runtime.clock.now_ms();
    let mut claims = Vec::with_capacity(batch.len());
    let mut fires = Vec::with_capacity(batch.len());
    let mut entries = Vec::with_capacity(batch.len());
    let mut tasks = Vec::with_capacity(batch.len());
    for (claimed, slots) in batch {
        // Debug level: at info, formatting a span's fields for every fire cost a tenth of
        // the node's CPU. The events of the settling name the task's queue and id themselves.
        // The `otel.*` and `messaging.*` fields are the OpenTelemetry messaging conventions'
        // for a consumer's "process" span: a tracing-opentelemetry layer that enables this
        // span (target `delayq_engine::dispatch`, level debug) exports it as such.
        let span = tracing::debug_span!(
            "task",
            otel.name = %ProcessSpanName(queue.name.as_str()),
            otel.kind = "consumer",
            messaging.system = "delayq",
            messaging.operation.type = "process",
            messaging.operation.name = "fire",
            messaging.destination.name = %queue.name,
            messaging.message.id = %claimed.id,
            messaging.delayq.attempt = claimed.attempt,
            messaging.delayq.generation = claimed.generation,
            messaging.delayq.due_ms = claimed.due_ms,
            queue = %queue.name,
            id = %claimed.id,
            attempt = claimed.attempt,
            generation = claimed.generation,
        );
        if let Some(parent) = &claimed.traceparent {
            crate::trace::link_to_schedule(&span, parent);
        }
        let task = Task {
            queue: queue.name.as_str().to_owned(),
            id: claimed.id.as_str().to_owned(),
            due_ms: claimed.due_ms,
            fired_ms,
            attempt: claimed.attempt,
            generation: claimed.generation,
            payload: claimed.payload.clone(),
            node: runtime.node_id().to_owned(),
        };
        let lateness_ms = fired_ms.saturating_sub(task.due_ms);
        span.in_scope(|| tracing::debug!(lateness_ms, "firing"));
        if task.attempt == 1 {
            record_tick_fired(runtime, &task);
        }
        queue.metrics.fired(lateness_ms);
        let (abort, registration) = AbortHandle::new_pair();
        let run = next_run_number(runtime);
        entries.push((
            run,
            RunningTask {
                token: claimed.token.clone(),
                abort,
                finished: false,
            },
        ));
        let Slots {
            queue: queue_slot,
            node,
            global,
        } = slots;
        fires.push(Fire {
            run,
            stage: Stage::Handling,
            lease: Lease::Held,
            queue_slot: Some(queue_slot),
            running_slots: Some((node, global)),
            span,
        });
        tasks.push((task, registration));
        claims.push(claimed);
    }
    runtime.running.lock().extend(entries);
    let handlers = tasks
        .into_iter()
        .enumerate()
        .map(|(index, (task, registration))| {
            let span = fires[index].span.clone();
            let created = span.in_scope(|| {
                std::panic::catch_unwind(AssertUnwindSafe(|| queue.handler.handle(task)))
            });
            run_handler(created, registration, index).instrument(span)
        })
        .collect();
    (claims, fires, handlers)
}

/// Runs one handler's future with its panic caught, until it ends or is aborted.
async fn run_handler(
    created: std::thread::Result<HandlerFuture>,
    registration: AbortRegistration,
    index: usize,
) -> (usize, Ran) {
    let ran = match created {
        Ok(future) => Abortable::new(AssertUnwindSafe(future).catch_unwind(), registration).await,
        Err(panic) => Ok(Err(panic)),
    };
    (index, ran)
}

/// How a handler's run ended.
fn outcome_of(ran: Ran) -> RunOutcome {
    match ran {
        Ok(Ok(Ok(()))) => RunOutcome::Succeeded,
        Ok(Ok(Err(error))) if ResourceExhausted::is_cause_of(&*error) => {
            RunOutcome::NoResources(error.to_string())
        }
        Ok(Ok(Err(error))) => match RetryAfter::find_in(&*error) {
            Some(asked) => RunOutcome::RetryAfter {
                error: error.to_string(),
                delay: asked.delay(),
            },
            None => RunOutcome::Failed(error.to_string()),
        },
        Ok(Err(panic)) => {
            RunOutcome::Failed(format!("handler panicked: {}", panic_message(&*panic)))
        }
        Err(Aborted) => RunOutcome::Aborted,
    }
}

/// A finished handler's task: once it has a settling place its queue slot goes to the next
/// task (not after the ack's round trip: claims then come in bigger batches); then its
/// result is recorded, unless shutdown released the task already (then it is not ours).
async fn settle_one(
    runtime: &Runtime,
    queue: &QueueRuntime,
    claimed: &ClaimedTask,
    run: u64,
    queue_slot: Option<OwnedSemaphorePermit>,
    outcome: RunOutcome,
) {
    let settling = queue.settling.acquire().await.ok();
    drop(queue_slot);
    if runtime.running.lock().remove(&run).is_some() {
        // Boxed here, once reached: this future is moved a few times on its way into the
        // claim's set, and the settling's (retries, backoff timer, the store's call) is large.
        Box::pin(settle(runtime, queue, claimed, outcome)).await;
    }
    drop(settling);
}

/// What a lease renewal of `fire` came back with.
fn renewed_lease(
    runtime: &Runtime,
    token: &LeaseToken,
    fire: &mut Fire,
    renewed: StorageResult<()>,
) {
    fire.lease = Lease::Held;
    match renewed {
        Ok(()) => runtime.health.ok(),
        Err(StorageError::StaleLease { .. }) => {
            fire.lease = Lease::Lost;
            tracing::warn!(
                queue = %token.partition.queue,
                id = %token.id,
                "lease lost while the handler runs; the task may be delivered again"
            );
        }
        Err(error) => runtime.health.failed("renew", &error),
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

/// The fire span's OpenTelemetry name, `process <queue>` (the messaging conventions'
/// `{operation} {destination}`), formatted only when the span is enabled.
struct ProcessSpanName<'a>(&'a str);

impl std::fmt::Display for ProcessSpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {}", self.0)
    }
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
