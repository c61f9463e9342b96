//! The [`Handler`] trait: what runs when a task is due.

use std::future::Future;
use std::pin::Pin;

use crate::task::Task;

/// The error a handler returns: anything that can be shown. The text is kept as the task's
/// last error; the attempt is retried with backoff or dead-lettered.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
