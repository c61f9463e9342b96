//! The handlers `delayq node` can run: print each task (`log`), run a command per task
//! (`exec`), or POST each task to a URL (`http`).

mod exec;
mod http;
mod log;
mod process;
mod webhook;

use std::sync::Arc;

use delayq_engine::{Handler, HandlerError, HandlerFuture, ResourceExhausted, Task};
use rustix::io::Errno;
use serde_json::{Map, Value};

pub use exec::ExecHandler;
pub use http::HttpHandler;
pub use log::LogHandler;
pub use webhook::{WebhookSigner, SECRETS_VARIABLE};

use super::telemetry::current_traceparent;
use super::values::insert_payload;

/// One of the node's handlers, cheap to clone into every queue.
#[derive(Clone)]
pub enum NodeHandler {
    /// One JSON line per task on stdout.
    Log(Arc<LogHandler>),
    /// A command per task.
    Exec(Arc<ExecHandler>),
    /// A POST per task.
    Http(Arc<HttpHandler>),
}

impl Handler for NodeHandler {
    /// Runs one task: `Ok` acks it, an error fails the attempt (retry, then dead letter).
    ///
    /// Each kind boxes its own future: one future over all three would be as big as the
    /// `http` handler's (a few KB), copied into its box for every task whatever the kind.
    fn handle(&self, task: Task) -> HandlerFuture {
        match self {
            NodeHandler::Log(handler) => {
                let handler = Arc::clone(handler);
                Box::pin(async move { handler.run(&task).await })
            }
            // Called inside the fire's span: its traceparent, when spans are exported, goes
            // to the command or the receiver.
            NodeHandler::Exec(handler) => {
                let handler = Arc::clone(handler);
                let traceparent = current_traceparent();
                Box::pin(async move { handler.run(&task, traceparent.as_deref()).await })
            }
            NodeHandler::Http(handler) => {
                let handler = Arc::clone(handler);
                let traceparent = current_traceparent();
                Box::pin(async move { handler.run(&task, traceparent.as_deref()).await })
            }
        }
    }
}

/// The task as the `http` handler posts it: every field, the payload as a string when it is
/// UTF-8, else as `payload_base64`.
pub fn task_json(task: &Task) -> Value {
    let mut object = Map::new();
    object.insert("queue".to_owned(), Value::from(task.queue.as_str()));
    object.insert("id".to_owned(), Value::from(task.id.as_str()));
    object.insert("due_ms".to_owned(), Value::from(task.due_ms));
    object.insert("fired_ms".to_owned(), Value::from(task.fired_ms));
    object.insert("attempt".to_owned(), Value::from(task.attempt));
    object.insert("generation".to_owned(), Value::from(task.generation));
    object.insert("node".to_owned(), Value::from(task.node.as_str()));
    insert_payload(&mut object, &task.payload);
    Value::Object(object)
}

/// Whether `error` says the node ran out of a resource rather than that the task or its
/// command is at fault: too many open files (`EMFILE`, and `ENFILE` system-wide), no process
/// or thread to spare (`EAGAIN` from `fork`, `RLIMIT_NPROC`), no memory (`ENOMEM`).
/// `ENOENT`, `EACCES` and the rest are the command's or the receiver's problem.
pub fn lacks_resources(error: &std::io::Error) -> bool {
    Errno::from_io_error(error).is_some_and(|errno| {
        [Errno::MFILE, Errno::NFILE, Errno::AGAIN, Errno::NOMEM].contains(&errno)
    })
}

/// The handler error `message` for a failure caused by `cause`: a [`ResourceExhausted`]
/// (the task is put back without spending its attempt) when an I/O error among `cause` and
/// its sources [`lacks_resources`], an ordinary failure otherwise.
pub fn failure(message: String, cause: &(dyn std::error::Error + 'static)) -> HandlerError {
    let starved = std::iter::successors(Some(cause), |error| error.source()).any(|error| {
        error
            .downcast_ref::<std::io::Error>()
            .is_some_and(lacks_resources)
    });
    if starved {
        Box::new(ResourceExhausted::new(message))
    } else {
        message.into()
    }
}

/// At most `max` bytes of the end of `text` (where the reason for a failure usually is),
/// cut at a character boundary, on one line.
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = text[start..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if start > 0 {
        format!("...{tail}")
    } else {
        tail
    }
}

/// At most `max` bytes of the start of `text` (where a response body says what went
/// wrong), cut at a character boundary, on one line, with `...` when cut.
pub fn excerpt_start(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lack_of_resources_is_the_nodes_failure() {
        use std::io;
        for errno in [Errno::MFILE, Errno::NFILE, Errno::AGAIN, Errno::NOMEM] {
            let error = io::Error::from_raw_os_error(errno.raw_os_error());
            assert!(lacks_resources(&error), "{error}");
            let failure = failure(format!("cannot run: {error}"), &error);
            assert!(ResourceExhausted::is_cause_of(&*failure), "{failure}");
            assert!(failure.to_string().starts_with("cannot run: "), "{failure}");
        }
        for errno in [Errno::NOENT, Errno::ACCESS, Errno::NOEXEC, Errno::SRCH] {
            let error = io::Error::from_raw_os_error(errno.raw_os_error());
            assert!(!lacks_resources(&error), "{error}");
            let failure = failure(format!("cannot run: {error}"), &error);
            assert!(!ResourceExhausted::is_cause_of(&*failure), "{failure}");
        }
        assert!(!lacks_resources(&io::Error::other("no errno")));
        // Deeper in a chain, as a client library wraps a failed connect.
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "connect failed")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrapped = Wrapper(io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()));
        let failure = failure("POST: connect failed".to_owned(), &wrapped);
        assert!(ResourceExhausted::is_cause_of(&*failure));
    }

    #[test]
    fn excerpt_keeps_the_end_on_one_line() {
        assert_eq!(excerpt(b"  line one\nline two\n", 100), "line one line two");
        assert_eq!(excerpt("aaaa\u{e9}bbb".as_bytes(), 4), "...bbb");
        assert_eq!(excerpt(b"", 10), "");
    }

    #[test]
    fn excerpt_start_keeps_the_beginning_on_one_line() {
        assert_eq!(excerpt_start(b" a\n b ", 10), "a b");
        assert_eq!(excerpt_start("ab\u{e9}cd".as_bytes(), 3), "ab...");
        assert_eq!(excerpt_start(b"", 10), "");
    }
}
