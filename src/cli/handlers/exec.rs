//! `--handler exec -- CMD [ARGS...]`: runs a command per task.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use delayq_engine::{HandlerError, Task};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::process::{die_with_node, scrub_config_variables, ProcessGroup, StderrCollector};
use super::{excerpt, failure};

/// How much of a command's stderr is kept (its end); the rest is read and discarded.
const STDERR_KEPT: usize = 4096;
/// How much of a failing command's stderr goes into the task's `last_error`.
const STDERR_EXCERPT: usize = 400;
/// After the command exited, how long its stderr may stay open (held by a process it left
/// in the background) before we stop reading it.
const STDERR_GRACE: Duration = Duration::from_millis(250);

/// Runs `program args...` per task with `DELAYQ_QUEUE`, `DELAYQ_ID`, `DELAYQ_DUE_MS`,
/// `DELAYQ_ATTEMPT` (and `DELAYQ_GENERATION`, `DELAYQ_FIRED_MS`, `DELAYQ_NODE`) in its
/// environment and the payload on stdin. Exit status 0 acks; anything else fails the
/// attempt with the status and the end of the command's stderr. The command's stdout is the
/// node's stdout. A command that cannot be started because the node ran out of open files,
/// processes or memory (`EMFILE`, `ENFILE`, `EAGAIN`, `ENOMEM`) does not fail the attempt:
/// the task is put back, due again in about a second, its attempt unspent; any other spawn
/// error (`ENOENT`, `EACCES`) fails it.
///
/// The command cleans up after itself:
/// - it inherits none of the node's `DELAYQ_*` variables (`DELAYQ_REDIS_URL` and the like
///   carry credentials), only the task's;
/// - it runs in a process group of its own, killed whole (the command and everything it
///   started) when the queue's `timeout` ends the attempt or the node shuts down;
/// - it dies with the node (SIGKILL through `PR_SET_PDEATHSIG`), even when the node is
///   killed with SIGKILL;
/// - only the last 4 KiB of its stderr are kept, the rest is drained, so it never blocks on
///   a full pipe.
#[derive(Debug)]
pub struct ExecHandler {
    program: String,
    args: Vec<String>,
}

impl ExecHandler {
    /// A handler for `command` (program first). Fails when it is empty or the program
    /// cannot be found, so that a typo is reported at start, not on every task.
    pub fn new(command: &[String]) -> Result<Self, String> {
        let (program, args) = command
            .split_first()
            .ok_or("--handler exec needs a command after `--`, e.g. `delayq node --handler exec -- ./on-task.sh`")?;
        if find_program(program).is_none() {
            return Err(format!(
                "--handler exec: command {program:?} not found (not a file, and not on PATH)"
            ));
        }
        Ok(ExecHandler {
            program: program.clone(),
            args: args.to_vec(),
        })
    }

    /// Runs the command for `task`, with `TRACEPARENT` set to `traceparent` (the fire's span)
    /// when there is one, and removed from its environment otherwise.
    pub async fn run(&self, task: &Task, traceparent: Option<&str>) -> Result<(), HandlerError> {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        scrub_config_variables(&mut command);
        match traceparent {
            Some(traceparent) => command.env("TRACEPARENT", traceparent),
            // The node's own, if it has one, is not this task's parent.
            None => command.env_remove("TRACEPARENT"),
        };
        command
            .env("DELAYQ_QUEUE", &task.queue)
            .env("DELAYQ_ID", &task.id)
            .env("DELAYQ_DUE_MS", task.due_ms.to_string())
            .env("DELAYQ_FIRED_MS", task.fired_ms.to_string())
            .env("DELAYQ_ATTEMPT", task.attempt.to_string())
            .env("DELAYQ_GENERATION", task.generation.to_string())
            .env("DELAYQ_NODE", &task.node)
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        die_with_node(&mut command);
        // Out of open files, processes or memory, the node is at fault, not the task: the
        // engine puts the task back without spending its attempt.
        let mut child = command
            .spawn()
            .map_err(|error| failure(format!("cannot run {:?}: {error}", self.program), &error))?;
        // Declared after `child`, so dropped before it: the group is killed while its
        // leader is still unreaped (its id cannot have been reused).
        let mut group = ProcessGroup::of(&child);
        let stderr = StderrCollector::start(child.stderr.take(), STDERR_KEPT);
        let stdin = child.stdin.take();
        let payload = task.payload.clone();
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its stdin closes the pipe early: not an error.
                let _ = stdin.write_all(&payload).await;
                let _ = stdin.shutdown().await;
            }
        };
        // Feeding stdin while stderr is drained on its own task: a command that writes much
        // to stderr before reading its input cannot deadlock us.
        let ((), status) = tokio::join!(feed, child.wait());
        let status = status.map_err(|error| format!("waiting for {:?}: {error}", self.program))?;
        group.reaped();
        let stderr = stderr.finish(STDERR_GRACE).await;
        let kept = stderr.end(STDERR_KEPT);
        if status.success() {
            if !kept.is_empty() {
                tracing::debug!(queue = %task.queue, id = %task.id, stderr_bytes = stderr.total(), stderr = %excerpt(kept, STDERR_EXCERPT), "handler command wrote to stderr");
            }
            return Ok(());
        }
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "killed by a signal".to_owned(),
        };
        let excerpt = excerpt(kept, STDERR_EXCERPT);
        Err(if excerpt.is_empty() {
            format!("{:?} failed: {status}", self.program)
        } else {
            format!("{:?} failed: {status}: {excerpt}", self.program)
        }
        .into())
    }
}

/// The file `program` names: a path when it contains a `/`, else the first match on `PATH`.
fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let path = Path::new(program);
        return path.is_file().then(|| path.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_command_is_refused_at_start() {
        let error = ExecHandler::new(&["no-such-command-delayq".to_owned()])
            .expect_err("a missing command is refused");
        assert!(error.contains("no-such-command-delayq"), "{error}");
        assert!(ExecHandler::new(&[]).is_err());
        assert!(ExecHandler::new(&["sh".to_owned(), "-c".to_owned(), "true".to_owned()]).is_ok());
    }
}
