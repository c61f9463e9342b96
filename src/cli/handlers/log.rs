//! `--handler log`: one JSON line per fired task on stdout.
//!
//! Writing to stdout can block for as long as the reader of the pipe likes (a stalled
//! `| consumer`, a terminal on hold). The handlers therefore never write themselves: they
//! hand their line to one writer task through a bounded channel and wait for the answer
//! with a time limit. The writer uses tokio's stdout, whose blocking `write(2)` runs on a
//! thread of the blocking pool, so a stalled pipe parks one such thread, never a worker: the
//! node keeps heartbeating and answering signals, and the attempts whose lines cannot be
//! written fail (and are retried) instead of hanging.

use std::io;
use std::time::Duration;

use delayq_engine::{HandlerError, Task};
use serde::Serialize;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// How long a handler waits for its line to be written before the attempt fails. The
/// queue's `timeout` fails it earlier when it is shorter.
pub const STDOUT_STALL_LIMIT: Duration = Duration::from_secs(10);

/// Lines waiting for the writer: beyond this, handlers wait (within their time limit) to
/// hand theirs over, so a stalled stdout holds a bounded amount of memory.
const QUEUED_LINES: usize = 1024;

/// Prints `{"queue","id","due_ms","fired_ms","attempt","node"}` per task, one line each,
/// flushed at once so that a reader sees every fire as it happens. The attempt succeeds once
/// its line was flushed; a stdout that does not take the line within
/// [`STDOUT_STALL_LIMIT`], or that is closed, fails it, so no task is acked without having
/// been reported.
#[derive(Debug)]
pub struct LogHandler {
    lines: mpsc::Sender<Line>,
    stall_limit: Duration,
}

/// One line for the writer, and where to say whether it was written.
struct Line {
    text: String,
    written: oneshot::Sender<io::Result<()>>,
}

#[derive(Serialize)]
struct Fired<'a> {
    queue: &'a str,
    id: &'a str,
    due_ms: u64,
    fired_ms: u64,
    attempt: u32,
    node: &'a str,
}

impl LogHandler {
    /// A handler printing to this process's stdout. Spawns the writer task, so it must be
    /// called inside a tokio runtime.
    pub fn new() -> Self {
        Self::with_writer(tokio::io::stdout(), STDOUT_STALL_LIMIT)
    }

    /// A handler printing to `output`, failing an attempt whose line is not written within
    /// `stall_limit` (tests use a pipe nobody reads).
    pub fn with_writer(
        output: impl AsyncWrite + Unpin + Send + 'static,
        stall_limit: Duration,
    ) -> Self {
        let (lines, queue) = mpsc::channel(QUEUED_LINES);
        tokio::spawn(write_lines(output, queue));
        LogHandler { lines, stall_limit }
    }

    /// Prints the task and waits until its line was flushed.
    pub async fn run(&self, task: &Task) -> Result<(), HandlerError> {
        let fired = Fired {
            queue: &task.queue,
            id: &task.id,
            due_ms: task.due_ms,
            fired_ms: task.fired_ms,
            attempt: task.attempt,
            node: &task.node,
        };
        let mut text = serde_json::to_string(&fired)?;
        text.push('\n');
        let (written, outcome) = oneshot::channel();
        let line = Line { text, written };
        let delivered = async {
            self.lines
                .send(line)
                .await
                .map_err(|_| "the stdout writer has stopped".to_owned())?;
            match outcome.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(format!("cannot write to stdout: {error}")),
                Err(_) => Err("the stdout writer has stopped".to_owned()),
            }
        };
        match tokio::time::timeout(self.stall_limit, delivered).await {
            Ok(result) => result.map_err(HandlerError::from),
            Err(_) => {
                tracing::warn!(queue = %task.queue, id = %task.id, limit = %humantime::format_duration(self.stall_limit), "stdout blocked: nobody reads the node's output");
                Err(format!(
                    "stdout blocked: the line was not written within {} (is the reader of the node's stdout stalled?)",
                    humantime::format_duration(self.stall_limit)
                )
                .into())
            }
        }
    }
}

impl Default for LogHandler {
    fn default() -> Self {
        Self::new()
    }
}

/// The most lines one write takes: the lines waiting when the writer comes round are
/// written and flushed together (one `write(2)` instead of one each: a burst of fires would
/// otherwise be limited by one blocking-pool round trip per line), but never more than this.
const LINES_PER_WRITE: usize = 256;

/// The writer task, until every handler is gone: the lines waiting (at most
/// [`LINES_PER_WRITE`]) are written whole and flushed at once, then each handler hears
/// whether its line was written. A line whose handler gave up waiting (its attempt failed
/// and will be retried) is skipped, so a stdout that comes back does not report fires that
/// were not acked.
async fn write_lines(mut output: impl AsyncWrite + Unpin, mut queue: mpsc::Receiver<Line>) {
    let mut batch: Vec<Line> = Vec::with_capacity(LINES_PER_WRITE);
    let mut text = String::new();
    while queue.recv_many(&mut batch, LINES_PER_WRITE).await > 0 {
        batch.retain(|line| !line.written.is_closed());
        text.clear();
        for line in &batch {
            text.push_str(&line.text);
        }
        let result = async {
            output.write_all(text.as_bytes()).await?;
            output.flush().await
        }
        .await;
        for line in batch.drain(..) {
            // The handler may have given up meanwhile: nobody to tell.
            let _ = line.written.send(match &result {
                Ok(()) => Ok(()),
                Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn task(id: &str) -> Task {
        Task {
            queue: "q".to_owned(),
            id: id.to_owned(),
            due_ms: 1_700_000_000_000,
            fired_ms: 1_700_000_000_002,
            attempt: 1,
            generation: 1,
            payload: bytes::Bytes::new(),
            node: "n1".to_owned(),
        }
    }

    #[tokio::test]
    async fn each_task_is_one_flushed_json_line() {
        let (output, mut reader) = tokio::io::duplex(4096);
        let handler = LogHandler::with_writer(output, Duration::from_secs(5));
        handler.run(&task("a")).await.expect("written");
        handler.run(&task("b")).await.expect("written");
        drop(handler);
        let mut text = String::new();
        reader.read_to_string(&mut text).await.expect("read");
        assert_eq!(
            text,
            "{\"queue\":\"q\",\"id\":\"a\",\"due_ms\":1700000000000,\"fired_ms\":1700000000002,\"attempt\":1,\"node\":\"n1\"}\n\
             {\"queue\":\"q\",\"id\":\"b\",\"due_ms\":1700000000000,\"fired_ms\":1700000000002,\"attempt\":1,\"node\":\"n1\"}\n"
        );
    }

    /// A pipe nobody reads: the attempt fails within the limit instead of hanging, and once
    /// the reader comes back the lines of the attempts that gave up are not printed.
    #[tokio::test]
    async fn a_stalled_stdout_fails_the_attempt_and_drops_its_line() {
        // Room for about one line: the second write blocks until somebody reads.
        let (output, mut reader) = tokio::io::duplex(128);
        let limit = Duration::from_millis(300);
        let handler = LogHandler::with_writer(output, limit);
        handler.run(&task("first")).await.expect("fits in the pipe");
        let started = std::time::Instant::now();
        let error = handler
            .run(&task("blocked"))
            .await
            .expect_err("a stalled stdout fails the attempt");
        assert!(error.to_string().contains("stdout blocked"), "{error}");
        assert!(started.elapsed() < limit * 3, "{:?}", started.elapsed());
        let error = handler
            .run(&task("queued"))
            .await
            .expect_err("still stalled");
        assert!(error.to_string().contains("stdout blocked"), "{error}");

        // The reader resumes: what was being written completes, the abandoned line is skipped.
        let mut text = String::new();
        let reading = tokio::spawn(async move {
            let _ = reader.read_to_string(&mut text).await;
            text
        });
        handler
            .run(&task("later"))
            .await
            .expect("the pipe drains again");
        drop(handler);
        let text = reading.await.expect("reader");
        let ids: Vec<&str> = text
            .lines()
            .map(|line| {
                line.split("\"id\":\"")
                    .nth(1)
                    .unwrap_or("")
                    .split('"')
                    .next()
                    .unwrap_or("")
            })
            .collect();
        assert!(
            !ids.contains(&"queued"),
            "the line of a failed attempt is not printed: {text}"
        );
        assert_eq!(ids.first(), Some(&"first"), "{text}");
        assert_eq!(ids.last(), Some(&"later"), "{text}");
    }

    #[tokio::test]
    async fn a_closed_stdout_fails_the_attempt() {
        let (output, reader) = tokio::io::duplex(64);
        drop(reader);
        let handler = LogHandler::with_writer(output, Duration::from_secs(5));
        let error = handler.run(&task("a")).await.expect_err("no reader");
        assert!(
            error.to_string().contains("cannot write to stdout"),
            "{error}"
        );
    }
}
