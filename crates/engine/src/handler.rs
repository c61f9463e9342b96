//! The [`Handler`] trait: what runs when a task is due.

use std::future::Future;
use std::pin::Pin;

use crate::task::Task;

/// The error a handler returns: anything that can be shown. The text is kept as the task's
/// last error; the attempt is retried with backoff or dead-lettered, unless the error is (or
/// is caused by) a [`ResourceExhausted`] (put back, attempt not spent) or a [`RetryAfter`]
/// (retried when it asks rather than on the backoff).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error a handler returns when the *node*, not the task, failed: a resource needed to
/// start the handler ran out (open files, processes, memory: `EMFILE`, `ENFILE`, `EAGAIN`,
/// `ENOMEM` when spawning a command). The task is put back, due again after about a second
/// ([`RESOURCE_RETRY_DELAY`] plus up to a quarter of it at random), *without* spending an
/// attempt, so no task is dead-lettered because of the node. Each one is counted in
/// `delayq_handler_resource_failures_total{queue}` and warned about at most once per 10 s.
///
/// The engine recognises it anywhere in the error's `source()` chain. `delayq node --handler
/// exec` returns it when the command cannot be spawned for one of those reasons; other spawn
/// errors (`ENOENT`, `EACCES`) stay ordinary failures.
///
/// ```
/// use delayq_engine::{HandlerError, ResourceExhausted, Task};
///
/// async fn handle(task: Task) -> Result<(), HandlerError> {
///     let file = std::fs::File::open("/dev/null").map_err(|error| -> HandlerError {
///         if error.raw_os_error() == Some(24) {
///             // EMFILE on Linux: try again later, the attempt is not spent.
///             Box::new(ResourceExhausted::new(format!("opening a file: {error}")))
///         } else {
///             Box::new(error)
///         }
///     })?;
///     drop((task, file));
///     Ok(())
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct ResourceExhausted {
    reason: String,
}

impl ResourceExhausted {
    /// The error, with what ran out (kept as the task's last error).
    pub fn new(reason: impl Into<String>) -> Self {
        ResourceExhausted {
            reason: reason.into(),
        }
    }

    /// Whether `error` is a [`ResourceExhausted`] or has one among its sources.
    pub fn is_cause_of(error: &(dyn std::error::Error + 'static)) -> bool {
        std::iter::successors(Some(error), |error| error.source())
            .any(|error| error.is::<ResourceExhausted>())
    }
}

/// The error a handler returns to have its task retried after [`delay`](RetryAfter::delay)
/// instead of on the queue's backoff: the receiver said when to come back (an HTTP 429 or 503
/// with `Retry-After`, a rate limit's reset, a maintenance window). The attempt *is* spent,
/// as with any failure: once `max_attempts` ran out the task is dead-lettered, and the reason
/// is kept as the task's last error.
///
/// The delay is capped at the queue's `backoff.max` (default 5 min), so that no retry waits
/// longer than the queue's configuration allows, whoever asked: set `backoff.max` at least as
/// high as the longest delay your receivers ask for. A zero delay retries at once.
///
/// The engine recognises it anywhere in the error's `source()` chain (a
/// [`ResourceExhausted`] in the same chain wins). `delayq node --handler http` returns it for
/// a 429 or 503 answer with a `Retry-After` header (delta seconds or an HTTP date).
///
/// ```
/// use std::time::Duration;
/// use delayq_engine::{HandlerError, RetryAfter, Task};
///
/// async fn handle(task: Task) -> Result<(), HandlerError> {
///     let quota_resets_in = Duration::from_secs(20); // as the partner's API said
///     if task.attempt == 1 {
///         return Err(Box::new(RetryAfter::new(
///             quota_resets_in,
///             format!("partner quota used up; {} comes back when it resets", task.id),
///         )));
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct RetryAfter {
    delay: std::time::Duration,
    reason: String,
}

impl RetryAfter {
    /// The error: retry after `delay` (from the moment the engine records the failure), with
    /// `reason` kept as the task's last error.
    pub fn new(delay: std::time::Duration, reason: impl Into<String>) -> Self {
        RetryAfter {
            delay,
            reason: reason.into(),
        }
    }

    /// How long after the failure the task asks to be retried (before the queue's cap).
    pub fn delay(&self) -> std::time::Duration {
        self.delay
    }

    /// The first [`RetryAfter`] among `error` and its sources.
    pub fn find_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a RetryAfter> {
        std::iter::successors(Some(error), |error| error.source())
            .find_map(|error| error.downcast_ref::<RetryAfter>())
    }
}

/// How long a task whose handler could not start for lack of resources waits before it is
/// due again (plus up to a quarter of it at random, so that the tasks put back together do
/// not all come back in the same millisecond).
pub const RESOURCE_RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// A boxed handler future.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'static>>;

/// Runs tasks of one queue (or of every queue, as the default handler).
///
/// Implemented for async closures `Fn(Task) -> impl Future<Output = Result<(), E>>`, so
/// most users never implement it by hand:
///
/// ```
/// use delayq_engine::{Handler, Task};
/// fn assert_handler(_: impl Handler) {}
/// assert_handler(|task: Task| async move {
///     tracing::info!(id = %task.id, "order timed out");
///     Ok::<(), std::io::Error>(())
/// });
/// ```
///
/// A handler that returns an error, panics or runs past the queue's `timeout` fails the
/// attempt; a panic never takes the worker down.
pub trait Handler: Send + Sync + 'static {
    /// Runs one task.
    fn handle(&self, task: Task) -> HandlerFuture;
}

impl<F, Fut, E> Handler for F
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<HandlerError> + 'static,
{
    fn handle(&self, task: Task) -> HandlerFuture {
        let future = self(task);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}
