//! One `redis-server` (or sentinel) process started from a config file in its own temporary
//! directory: the building block of the cluster, sentinel and TLS setups.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// How long a process may take to become ready.
const START_LIMIT: Duration = Duration::from_secs(15);

/// How a started process shows it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// It answers `PING` on its plain TCP port.
    Ping,
    /// Its log has the line "Ready to accept connections" (a TLS-only server).
    LogLine,
}

/// A `redis-server` child process with its config file, log and data in a temporary
/// directory. Killed (SIGKILL) and reaped on drop; its log tail is printed when a test is
/// panicking.
#[derive(Debug)]
pub struct RedisProcess {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    role: &'static str,
    sentinel: bool,
    readiness: Readiness,
}

impl RedisProcess {
    /// Writes `config` (one directive per line; port, bind, dir and logfile are added) and
    /// starts `redis-server` on it, waiting until it is ready.
    pub(crate) fn start(
        role: &'static str,
        port: u16,
        config: &str,
        sentinel: bool,
        readiness: Readiness,
    ) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("delayq-{role}-"))
            .tempdir()
            .map_err(|error| format!("create a temporary directory: {error}"))?;
        let mut process = RedisProcess {
            child: None,
            port,
            dir,
            role,
            sentinel,
            readiness,
        };
        let full = format!(
            "{}bind 127.0.0.1\ndir {}\nlogfile {}\ndaemonize no\n{config}\n",
            if readiness == Readiness::Ping {
                format!("port {port}\n")
            } else {
                String::new()
            },
            process.dir.path().display(),
            process.log_path().display(),
        );
        std::fs::write(process.config_path(), full)
            .map_err(|error| format!("write {}: {error}", process.config_path().display()))?;
        process.spawn()?;
        Ok(process)
    }

    /// The port (the TLS port for a TLS-only server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The working directory (config, log, data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last `lines` lines of the log, headed by the role and port, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(self.role, self.port, &self.log(), lines)
    }

    /// Kills the process with SIGKILL (no shutdown, no save) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same config, port and directory.
    ///
    /// # Panics
    /// When it does not become ready in time.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(error) if Instant::now() < deadline => {
                    let _ = error;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(error) => panic!(
                    "{} did not restart: {error}\n{}",
                    self.role,
                    self.log_tail(30)
                ),
            }
        }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("redis.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let offset = self.log().len();
        let mut command = Command::new("redis-server");
        command.arg(self.config_path());
        if self.sentinel {
            command.arg("--sentinel");
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|error| format!("spawn redis-server: {error} ({})", crate::INSTALL_HINT))?;
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let ready = match self.readiness {
                Readiness::Ping => answers(self.port),
                Readiness::LogLine => self
                    .log()
                    .get(offset..)
                    .is_some_and(|new| new.contains("Ready to accept connections")),
            };
            if ready {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Err(format!(
                    "{} exited with {status}: {stderr}\n{}",
                    self.role,
                    self.log_tail(30)
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} not ready within {START_LIMIT:?}\n{}",
                    self.role,
                    self.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail(30));
        }
        self.kill();
    }
}

/// The last `lines` lines of a server's `log`, headed by its role and port: what a failing
/// test prints of every server the harness started.
pub(crate) fn log_tail(role: &str, port: u16, log: &str, lines: usize) -> String {
    let tail: Vec<&str> = log.lines().rev().take(lines).collect();
    let mut text = format!("--- {role} on port {port} (last lines of its log) ---\n");
    for line in tail.iter().rev() {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Next port to try for [`port_pair`]; each test process starts at its own offset.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A port `p` in 20000..30000 such that `p` and `p + 10000` (a cluster node's bus port) are
/// both free a moment ago.
///
/// # Panics
/// When no such pair is found in the whole range.
pub fn port_pair() -> u16 {
    const LOW: u16 = 20000;
    const SPAN: u16 = 10000;
    let _ = NEXT_PORT.compare_exchange(
        0,
        (std::process::id() % u32::from(SPAN)) as u16,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let offset = NEXT_PORT.fetch_add(1, Ordering::SeqCst) % SPAN;
        let port = LOW + offset;
        if free(port) && free(port + 10000) {
            return port;
        }
    }
    panic!("no free port pair (p, p+10000) in 20000..30000");
}

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Whether a server answers on `port`: `PONG`, or `NOAUTH` from one that wants a password.
fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).is_ok()
        && (line.starts_with("+PONG") || line.starts_with("-NOAUTH"))
}

/// A synchronous connection to a plain port, logged in with `password` when given, for the
/// harness's own commands.
pub(crate) fn connect(port: u16, password: Option<&str>) -> redis::RedisResult<redis::Connection> {
    let login = password
        .map(|password| format!(":{password}@"))
        .unwrap_or_default();
    let client = redis::Client::open(format!("redis://{login}127.0.0.1:{port}/"))?;
    client.get_connection_with_timeout(Duration::from_secs(2))
}

/// Runs `args` on the plain port `port` and returns the reply.
pub(crate) fn run(port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
    run_as(port, None, args)
}

/// Runs `args` on the plain port `port`, logged in with `password`, and returns the reply.
pub(crate) fn run_as(
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> redis::RedisResult<redis::Value> {
    let mut connection = connect(port, password)?;
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(&mut connection)
}

/// Runs `args` on `port` and returns the reply as text (`INFO`, `CLUSTER NODES`, ...).
pub(crate) fn run_text(port: u16, args: &[&str]) -> redis::RedisResult<String> {
    let mut connection = connect(port, None)?;
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(&mut connection)
}

/// Polls `check` every 50 ms until it returns `Some` or `limit` passes.
pub(crate) fn poll<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
