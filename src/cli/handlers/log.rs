//! `--handler log`: one JSON line per fired task on stdout.

use std::io::Write;

use delayq_engine::{HandlerError, Task};
use serde::Serialize;

/// Prints `{"queue","id","due_ms","fired_ms","attempt","node"}` per task, one line each,
/// flushed at once so that a reader sees every fire as it happens.
#[derive(Debug, Default)]
pub struct LogHandler;

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
    /// Prints the task. A failed write (stdout closed) fails the attempt, so the task is
    /// not acked without having been reported.
    pub fn run(&self, task: &Task) -> Result<(), HandlerError> {
        let fired = Fired {
            queue: &task.queue,
            id: &task.id,
            due_ms: task.due_ms,
            fired_ms: task.fired_ms,
            attempt: task.attempt,
            node: &task.node,
        };
        let mut line = serde_json::to_string(&fired)?;
        line.push('\n');
        // One write of the whole line, so lines of concurrent tasks never interleave.
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(line.as_bytes())?;
        stdout.flush()?;
        Ok(())
    }
}
