//! `--handler exec -- CMD [ARGS...]`: runs a command per task.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use delayq_engine::{HandlerError, Task};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::excerpt;

/// How much of a failing command's stderr goes into the task's `last_error`.
const STDERR_EXCERPT: usize = 400;

/// Runs `program args...` per task with `DELAYQ_QUEUE`, `DELAYQ_ID`, `DELAYQ_DUE_MS`,
/// `DELAYQ_ATTEMPT` (and `DELAYQ_GENERATION`, `DELAYQ_FIRED_MS`, `DELAYQ_NODE`) in its
/// environment and the payload on stdin. Exit status 0 acks; anything else fails the
/// attempt with the status and the end of the command's stderr. The command's stdout is the
/// node's stdout. A command still running when the queue's `timeout` ends is killed.
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

    /// Runs the command for `task`.
    pub async fn run(&self, task: &Task) -> Result<(), HandlerError> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
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
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot run {:?}: {error}", self.program))?;
        let stdin = child.stdin.take();
        let payload = task.payload.clone();
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its stdin closes the pipe early: not an error.
                let _ = stdin.write_all(&payload).await;
                let _ = stdin.shutdown().await;
            }
        };
        // Feeding stdin while collecting stderr: a command that writes much to stderr
        // before reading its input cannot deadlock us.
        let ((), output) = tokio::join!(feed, child.wait_with_output());
        let output = output.map_err(|error| format!("waiting for {:?}: {error}", self.program))?;
        if output.status.success() {
            if !output.stderr.is_empty() {
                tracing::debug!(queue = %task.queue, id = %task.id, stderr = %excerpt(&output.stderr, STDERR_EXCERPT), "handler command wrote to stderr");
            }
            return Ok(());
        }
        let status = match output.status.code() {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_owned(),
        };
        let stderr = excerpt(&output.stderr, STDERR_EXCERPT);
        Err(if stderr.is_empty() {
            format!("{:?} failed: {status}", self.program)
        } else {
            format!("{:?} failed: {status}: {stderr}", self.program)
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
