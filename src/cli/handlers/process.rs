//! The process side of `--handler exec`: a command in its own process group that dies with
//! the node, a guard that kills that whole group when the attempt is given up, and a
//! stderr collector that keeps only the end of what the command writes.

use std::io;
use std::sync::{Arc, Mutex};

use rustix::process::{Pid, Signal};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, Command};
use tokio::task::JoinHandle;

/// The prefix of delayq's configuration variables (`DELAYQ_REDIS_URL`, `DELAYQ_HTTP_TOKEN`,
/// ...): some carry credentials, so a handler command inherits none of them.
pub const CONFIG_VARIABLE_PREFIX: &str = "DELAYQ_";

/// Removes every `DELAYQ_*` variable of the node's environment from `command`'s (the task's
/// own variables are set afterwards).
pub fn scrub_config_variables(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(|name| name.starts_with(CONFIG_VARIABLE_PREFIX))
        {
            command.env_remove(name);
        }
    }
}

/// Makes the child receive SIGKILL when the node dies (even by SIGKILL), through
/// `PR_SET_PDEATHSIG` set between `fork` and `exec`.
///
/// Linux sends the signal when the *thread* that forked the child ends: commands are spawned
/// from the runtime's worker threads, which live as long as the node.
///
/// This is the one place of the workspace with `unsafe` code: `pre_exec` is the only way to
/// run something in the child before `exec`, and no safe API of std, tokio or rustix sets
/// another process's parent-death signal.
#[allow(unsafe_code)]
pub fn die_with_node(command: &mut Command) {
    let node = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child, where only async-signal-safe work is
    // allowed. It makes two raw system calls (prctl, getppid) through rustix, which neither
    // allocates nor takes locks, and builds its errors from plain error numbers (no
    // allocation either). It touches no state shared with other threads of the node.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The node may have died between fork and prctl: then nobody would send the
            // signal, so give up now.
            if rustix::process::getppid() != Some(node) {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        });
    }
}

/// Kills the process group led by a child (SIGKILL to every member: the command and what it
/// started) when dropped before [`ProcessGroup::reaped`]: the attempt timed out, was
/// aborted, or the node is shutting down.
///
/// Only an unreaped leader keeps the group id from being reused, so the guard is disarmed
/// as soon as the leader has been waited for.
pub struct ProcessGroup {
    leader: Option<Pid>,
}

impl ProcessGroup {
    /// The group of `child`, which was spawned with `process_group(0)`.
    pub fn of(child: &Child) -> Self {
        let leader = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(Pid::from_raw);
        ProcessGroup { leader }
    }

    /// The leader was waited for: the group id may be reused from now on, never kill it.
    pub fn reaped(&mut self) {
        self.leader = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(leader) = self.leader.take() {
            match rustix::process::kill_process_group(leader, Signal::KILL) {
                Ok(()) => tracing::debug!(
                    pgid = leader.as_raw_nonzero().get(),
                    "killed the handler's process group"
                ),
                Err(error) if error == rustix::io::Errno::SRCH => {}
                Err(error) => {
                    tracing::warn!(pgid = leader.as_raw_nonzero().get(), %error, "cannot kill the handler's process group")
                }
            }
        }
    }
}

/// The last `keep` bytes of a stream, and how many bytes it had in all.
#[derive(Debug, Default)]
pub struct Tail {
    bytes: Vec<u8>,
    total: u64,
}

impl Tail {
    /// Appends `chunk`, keeping at most `keep` bytes (trimmed in batches, so that appending
    /// stays cheap).
    pub fn push(&mut self, chunk: &[u8], keep: usize) {
        self.total += chunk.len() as u64;
        self.bytes
            .extend_from_slice(&chunk[chunk.len().saturating_sub(keep)..]);
        if self.bytes.len() > 2 * keep {
            let cut = self.bytes.len() - keep;
            self.bytes.drain(..cut);
        }
    }

    /// The kept end of the stream (at most `keep` bytes).
    pub fn end(&self, keep: usize) -> &[u8] {
        &self.bytes[self.bytes.len().saturating_sub(keep)..]
    }

    /// How many bytes were written in all.
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// Reads a child's stderr to its end on a task of its own, keeping the last `keep` bytes
/// and discarding the rest, so a chatty command never blocks on a full pipe. The task is
/// aborted when this is dropped.
pub struct StderrCollector {
    tail: Arc<Mutex<Tail>>,
    reader: JoinHandle<()>,
}

impl StderrCollector {
    /// Starts reading `pipe`.
    pub fn start(pipe: Option<ChildStderr>, keep: usize) -> Self {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let sink = tail.clone();
        let reader = tokio::spawn(async move {
            let Some(mut pipe) = pipe else { return };
            let mut buffer = vec![0; 16 * 1024];
            loop {
                match pipe.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => {
                        if let Ok(mut tail) = sink.lock() {
                            tail.push(&buffer[..read], keep);
                        }
                    }
                }
            }
        });
        StderrCollector { tail, reader }
    }

    /// Waits up to `grace` for the end of the stream (processes the command left behind may
    /// hold the pipe open: they are not waited for), then returns what was kept.
    pub async fn finish(mut self, grace: std::time::Duration) -> Tail {
        let _ = tokio::time::timeout(grace, &mut self.reader).await;
        self.reader.abort();
        let kept = match self.tail.lock() {
            Ok(mut tail) => std::mem::take(&mut *tail),
            Err(_) => Tail::default(),
        };
        kept
    }
}

impl Drop for StderrCollector {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_end_and_counts_everything() {
        let mut tail = Tail::default();
        for _ in 0..1000 {
            tail.push(b"0123456789", 25);
        }
        tail.push(b"the end", 25);
        assert_eq!(tail.total(), 10_007);
        assert_eq!(tail.end(25), b"234567890123456789the end");
        assert!(tail.bytes.len() <= 50);
        let mut big = Tail::default();
        big.push(&[b'x'; 1000], 10);
        assert_eq!(big.end(10), [b'x'; 10]);
        assert_eq!(big.total(), 1000);
    }
}
