//! Test harness for delayq: a private `redis-server` per test.
//!
//! Every test that needs Redis starts its own server on a free port in a fresh temporary
//! directory, so no test touches port 6379 and no test depends on another one. The server is
//! killed and reaped when the [`RedisServer`] is dropped.
//!
//! ```no_run
//! let server = delayq_testkit::RedisServer::start();
//! let url = server.url();
//! assert!(url.starts_with("redis://127.0.0.1:"));
//! ```
//!
//! Fault tests can [`RedisServer::stop`] the server (connections are refused), start it again
//! on the same port with [`RedisServer::restart`], and with [`RedisOptions::aof`] the data that
//! Redis acknowledged survives the restart (`appendfsync always`).
//!
//! Beyond one server: [`RedisCluster`] (three masters, optionally with replicas, with helpers
//! to kill a master and wait for the failover), [`SentinelSet`] (a master, two replicas and
//! three sentinels) and [`TlsRedis`] (TLS only, certificates made in-process, `requirepass`
//! and an ACL user limited to a key prefix). They need the `redis-server` and `redis-tools`
//! (redis-cli) OS packages; sentinels run as `redis-server <conf> --sentinel`.
//!
//! [`PostgresServer`] is the same for PostgreSQL: a private server from the OS package
//! (`DELAYQ_PG_BIN` or the newest `/usr/lib/postgresql/<version>/bin`) on a free port, as the
//! user `nobody` when the tests run as root, optionally with TLS ([`PostgresOptions::tls`]).

mod cluster;
mod pg_template;
mod postgres;
mod process;
mod sentinel;
mod tls;

pub use cluster::{ClusterNode, ClusterOptions, RedisCluster};
pub use pg_template::POSTGRES_INSTALL_HINT;
pub use postgres::{PostgresOptions, PostgresServer, DATABASE as POSTGRES_DATABASE};
pub use process::{port_pair, RedisProcess};
pub use sentinel::{SentinelOptions, SentinelSet};
pub use tls::{ensure_crypto_provider, AclUser, TlsFiles, TlsRedis, DELAYQ_COMMANDS};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start a private server.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Turn on the append-only file with `appendfsync always`, so a restart keeps every write
    /// that Redis acknowledged.
    pub aof: bool,
    /// Extra `--name value` arguments passed to `redis-server`.
    pub extra_args: Vec<(String, String)>,
}

/// A `redis-server` child process owned by one test.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    options: RedisOptions,
}

/// The one line printed when `redis-server` is missing.
pub const INSTALL_HINT: &str = "redis-server not found on PATH: install it (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`) and run the tests again";

impl RedisServer {
    /// Starts a server without persistence on a free port and waits until it answers PING.
    ///
    /// # Panics
    /// When `redis-server` is not installed (with [`INSTALL_HINT`]) or does not start.
    pub fn start() -> Self {
        Self::start_with(RedisOptions::default())
    }

    /// Starts a server with the given options.
    ///
    /// # Panics
    /// When `redis-server` is not installed or does not start within 10 seconds.
    pub fn start_with(options: RedisOptions) -> Self {
        if !redis_server_installed() {
            panic!("{INSTALL_HINT}");
        }
        // A free port can be taken by someone else between our probe and the server's bind;
        // try a few ports before giving up.
        let mut last_error = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("delayq-redis-")
                .tempdir()
                .expect("create a temporary directory for redis-server");
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                dir,
                options: options.clone(),
            };
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A client for the server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid redis URL")
    }

    /// The server's working directory (log, AOF).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills the server (SIGKILL) and waits for it; connections are refused until
    /// [`RedisServer::restart`].
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Whether the server process is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server if it runs, then starts it again on the same port and directory.
    /// With [`RedisOptions::aof`] the data survives; without it the server comes back empty.
    ///
    /// # Panics
    /// When the server does not come back within 10 seconds.
    pub fn restart(&mut self) {
        self.kill();
        // The port was ours a moment ago; the kernel may need a moment to release it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(error) if Instant::now() < deadline => {
                    self.kill();
                    let _ = error;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(error) => panic!("redis-server did not restart: {error}\n{}", self.log()),
            }
        }
    }

    /// Runs one command and returns its reply as a string (for `INFO`, `CLIENT KILL`, ...).
    pub fn command(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut connection = self.client().get_connection()?;
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        command.query(&mut connection)
    }

    /// `used_memory` from `INFO memory`, in bytes.
    pub fn used_memory(&self) -> u64 {
        let mut connection = self
            .client()
            .get_connection()
            .expect("connect to redis-server");
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query(&mut connection)
            .expect("INFO memory");
        info.lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `total_net_output_bytes` from `INFO stats`: every byte the server sent its clients
    /// since it started (measure a read's cost as the difference around it).
    pub fn net_output_bytes(&self) -> u64 {
        let mut connection = self
            .client()
            .get_connection()
            .expect("connect to redis-server");
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut connection)
            .expect("INFO stats");
        info.lines()
            .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total_net_output_bytes in INFO stats: {info}"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no");
        if self.options.aof {
            command
                .arg("--appendonly")
                .arg("yes")
                .arg("--appendfsync")
                .arg("always");
        } else {
            command.arg("--appendonly").arg("no");
        }
        for (name, value) in &self.options.extra_args {
            command.arg(format!("--{name}")).arg(value);
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|error| format!("spawn redis-server: {error}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Err(format!(
                    "redis-server exited with {status}: {stderr}{}",
                    self.log()
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no PONG within 10s\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprint!(
                "{}",
                process::log_tail("redis-server", self.port, &self.log(), 30)
            );
        }
        self.kill();
    }
}

/// The `calls=` of `cmdstat_<command>` in an `INFO commandstats` text (0 when absent).
pub fn command_calls(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether `redis-server` can be run.
pub fn redis_server_installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false)
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("bind an ephemeral port")
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("+PONG")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_and_restarts_with_aof() {
        let mut server = RedisServer::start_with(RedisOptions {
            aof: true,
            ..Default::default()
        });
        assert_ne!(server.port(), 6379);
        let mut connection = server.client().get_connection().expect("connect");
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query(&mut connection)
            .expect("SET");
        server.restart();
        let mut connection = server.client().get_connection().expect("reconnect");
        let value: Option<String> = redis::cmd("GET")
            .arg("k")
            .query(&mut connection)
            .expect("GET");
        assert_eq!(value.as_deref(), Some("v"));
    }

    #[test]
    fn stop_refuses_connections() {
        let mut server = RedisServer::start();
        server.stop();
        assert!(!ping(server.port()));
        assert!(!server.is_running());
    }
}
