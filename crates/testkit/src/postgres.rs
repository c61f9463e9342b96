//! A private PostgreSQL server per test: the data directory copied from a cluster made once
//! with `initdb`, a free port on 127.0.0.1, the unix socket in the test's temporary directory,
//! durability against power loss off (`fsync`, `full_page_writes`; a killed process still
//! loses no acknowledged commit, as `synchronous_commit` stays on), optional TLS with
//! certificates made in-process, and `pg_stat_statements` loaded where the package ships it.
//!
//! PostgreSQL refuses to run as root; when the tests run as root, the server and `initdb` run
//! as the user `nobody`, which owns the temporary directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pg_template::{self, Account, Binaries};
use crate::TlsFiles;

/// The database created for the tests (owned by [`PostgresServer::USER`]).
pub const DATABASE: &str = "delayq";

/// How long the server may take to accept connections.
const START_LIMIT: Duration = Duration::from_secs(20);

/// How to start a private server.
#[derive(Debug, Clone, Default)]
pub struct PostgresOptions {
    /// Serve TLS with a certificate for 127.0.0.1 and localhost signed by a test CA
    /// ([`PostgresServer::tls_files`]), and refuse TCP logins without TLS.
    pub tls: bool,
    /// Extra `-c name=value` settings.
    pub settings: Vec<(String, String)>,
}

/// A `postgres` server owned by one test. Killed (the postmaster and its backends, SIGKILL)
/// and reaped on drop; the tail of its log is printed when the test is panicking.
#[derive(Debug)]
pub struct PostgresServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    binaries: Binaries,
    account: Option<Account>,
    tls: Option<TlsFiles>,
    options: PostgresOptions,
}

impl PostgresServer {
    /// The login role the tests use: owner of [`DATABASE`], not a superuser.
    pub const USER: &'static str = "delayq";
    /// The password of [`PostgresServer::USER`] and of the superuser `postgres`.
    pub const PASSWORD: &'static str = pg_template::PASSWORD;

    /// Starts a server without TLS.
    ///
    /// # Panics
    /// When the PostgreSQL server is not installed (one line saying how to install it) or does
    /// not start; the message carries the log's tail.
    pub fn start() -> Self {
        Self::start_with(PostgresOptions::default())
    }

    /// Starts a server with `options`.
    ///
    /// # Panics
    /// As [`PostgresServer::start`].
    pub fn start_with(options: PostgresOptions) -> Self {
        let binaries = Binaries::locate().unwrap_or_else(|hint| panic!("{hint}"));
        let account = Account::for_server();
        let template = pg_template::template(&binaries, account.as_ref())
            .unwrap_or_else(|error| panic!("PostgreSQL test template: {error}"));
        let mut last_error = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("delayq-pg-")
                .tempdir_in(pg_template::scratch_root())
                .expect("create a temporary directory for postgres");
            let mut server = PostgresServer {
                child: None,
                port: crate::free_port(),
                dir,
                binaries: binaries.clone(),
                account: account.clone(),
                tls: options.tls.then(TlsFiles::generate),
                options: options.clone(),
            };
            if let Err(error) = server.lay_out(&template) {
                panic!("prepare the postgres data directory: {error}");
            }
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("postgres did not start: {last_error}");
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://delayq:<password>@127.0.0.1:<port>/delayq` (add `?sslmode=...` for TLS).
    pub fn url(&self) -> String {
        format!(
            "postgres://{}:{}@127.0.0.1:{}/{DATABASE}",
            Self::USER,
            Self::PASSWORD,
            self.port
        )
    }

    /// The URL of the superuser `postgres` on [`DATABASE`].
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres:{}@127.0.0.1:{}/{DATABASE}",
            Self::PASSWORD,
            self.port
        )
    }

    /// The certificates of a server started with [`PostgresOptions::tls`].
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The directory of the unix socket (`host=` for a local superuser login).
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    /// The server's working directory (data directory, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the server process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether `pg_stat_statements` is loaded (the OS package ships it).
    pub fn has_pg_stat_statements(&self) -> bool {
        self.binaries.pg_stat_statements
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last `lines` lines of the log, headed by the port, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::log_tail("postgres", self.port, &self.log(), lines)
    }

    /// Runs `sql` with `psql` as the superuser over the unix socket, on [`DATABASE`], and
    /// returns its unaligned, tuples-only output (`|` between columns, one row per line).
    /// Blocking; fine in a test, also inside a runtime for the short statements it is meant for.
    pub fn psql(&self, sql: &str) -> Result<String, String> {
        let output = Command::new(self.binaries.bin.join("psql"))
            .args([
                "-X",
                "-A",
                "-t",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-U",
                "postgres",
            ])
            .arg("-h")
            .arg(self.socket_dir())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-d")
            .arg(DATABASE)
            .arg("-c")
            .arg(sql)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("run psql: {error}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout)
                .trim_end()
                .to_owned())
        } else {
            Err(format!(
                "psql -c {sql:?} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            ))
        }
    }

    /// Kills the server and all its backends (SIGKILL) and reaps it: a crash, no shutdown.
    /// Connections are refused until [`PostgresServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_server(&mut child);
        }
    }

    /// Stops the server with a fast shutdown (clients get `57P01 admin_shutdown`), waiting for
    /// it to exit (killing it after 10 seconds). Connections are refused until
    /// [`PostgresServer::restart`].
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::INT,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // The postmaster exits after its backends.
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_server(&mut child);
    }

    /// Stops the server if it runs (fast shutdown), then starts it again on the same port and
    /// data directory; the data survives (after a [`PostgresServer::kill`], through crash
    /// recovery).
    ///
    /// # Panics
    /// When the server does not come back within 20 seconds.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + START_LIMIT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                // The port, or the old server's shared memory, may take a moment to be freed.
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(error) => panic!("postgres did not restart: {error}"),
            }
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Copies the template into `data/`, makes the socket directory, writes `pg_hba.conf` and
    /// the TLS files, and hands it all to the server's account.
    fn lay_out(&self, template: &Path) -> Result<(), String> {
        pg_template::copy_tree(template, &self.data_dir())?;
        let socket = self.socket_dir();
        std::fs::create_dir(&socket).map_err(|error| format!("create {socket:?}: {error}"))?;
        // Local (socket) logins are trusted: the harness's psql. TCP logins need the password,
        // and over TLS only, for a TLS server.
        let tcp = if self.tls.is_some() {
            "hostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 127.0.0.1/32 reject\n"
        } else {
            "host all all 127.0.0.1/32 scram-sha-256\n"
        };
        let hba = self.data_dir().join("pg_hba.conf");
        std::fs::write(&hba, format!("local all all trust\n{tcp}"))
            .map_err(|error| format!("write {hba:?}: {error}"))?;
        if let Some(files) = &self.tls {
            for (from, name) in [
                (&files.server_cert, "server.crt"),
                (&files.server_key, "server.key"),
                (&files.ca_file, "ca.crt"),
            ] {
                let to = self.data_dir().join(name);
                std::fs::copy(from, &to).map_err(|error| format!("copy {from:?}: {error}"))?;
                pg_template::private_file(&to)?;
            }
        }
        std::fs::File::create(self.log_path())
            .map_err(|error| format!("create the log file: {error}"))?;
        if let Some(account) = &self.account {
            account.own_tree(self.dir.path())?;
        }
        Ok(())
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let offset = self.log().len();
        let log = File::options()
            .append(true)
            .create(true)
            .open(self.log_path())
            .map_err(|error| format!("open the log file: {error}"))?;
        let mut command = Command::new(self.binaries.bin.join("postgres"));
        command.arg("-D").arg(self.data_dir());
        let mut settings: Vec<(String, String)> = vec![
            ("listen_addresses".into(), "127.0.0.1".into()),
            ("port".into(), self.port.to_string()),
            (
                "unix_socket_directories".into(),
                self.socket_dir().display().to_string(),
            ),
            ("fsync".into(), "off".into()),
            // `synchronous_commit` stays on: with `fsync` off a commit costs one write(2), and
            // off it would let a killed server forget commits it had acknowledged (up to
            // 3 × `wal_writer_delay`), which the fault tests must never see.
            ("full_page_writes".into(), "off".into()),
            ("shared_buffers".into(), "32MB".into()),
            // Dynamic shared memory as files in the data directory: a killed server's
            // segments go with its temporary directory instead of piling up in /dev/shm.
            ("dynamic_shared_memory_type".into(), "mmap".into()),
            ("max_connections".into(), "200".into()),
        ];
        if self.binaries.pg_stat_statements {
            settings.push((
                "shared_preload_libraries".into(),
                "pg_stat_statements".into(),
            ));
        }
        if self.tls.is_some() {
            for (name, value) in [
                ("ssl", "on"),
                ("ssl_cert_file", "server.crt"),
                ("ssl_key_file", "server.key"),
                ("ssl_ca_file", "ca.crt"),
            ] {
                settings.push((name.into(), value.into()));
            }
        }
        settings.extend(self.options.settings.iter().cloned());
        for (name, value) in &settings {
            command.arg("-c").arg(format!("{name}={value}"));
        }
        command
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if let Some(account) = &self.account {
            account.apply(&mut command);
        }
        let mut child = command
            .spawn()
            .map_err(|error| format!("spawn postgres: {error}"))?;
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let log = self.log();
            if log
                .get(offset..)
                .is_some_and(|new| new.contains("database system is ready to accept connections"))
            {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "postgres exited with {status}\n{}",
                    self.log_tail(30)
                ));
            }
            if Instant::now() > deadline {
                kill_server(&mut child);
                return Err(format!(
                    "postgres not ready within {START_LIMIT:?}\n{}",
                    self.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail(40));
        }
        self.kill();
    }
}

/// SIGKILLs the postmaster `child` and every process it forked, and reaps it. Each backend
/// is the leader of its own session (postgres calls `setsid`), so a process-group kill would
/// miss them; the postmaster is stopped first so that it forks no new one meanwhile.
fn kill_server(child: &mut Child) {
    use rustix::process::{kill_process, Pid, Signal};
    let postmaster = Pid::from_child(child);
    let _ = kill_process(postmaster, Signal::STOP);
    let backends = children_of(postmaster.as_raw_nonzero().get());
    for pid in &backends {
        if let Some(pid) = Pid::from_raw(*pid) {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    // A backend that has not exited yet still holds the shared memory a restart needs.
    let deadline = Instant::now() + Duration::from_secs(5);
    while backends.iter().any(|pid| alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The processes whose parent is `parent` (from /proc).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|(_, ppid)| ppid == parent))
        .collect()
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

/// The state and parent of `pid` from /proc/<pid>/stat.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_and_keeps_data_over_a_kill_and_a_restart() {
        let mut server = PostgresServer::start();
        assert_ne!(server.port(), 5432);
        server
            .psql("CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
            .expect("create a table");
        assert_eq!(
            server.psql("SELECT current_user").expect("select"),
            "postgres"
        );
        server.kill();
        assert!(!server.is_running());
        assert!(server.psql("SELECT 1").is_err());
        server.restart();
        assert_eq!(server.psql("SELECT v FROM kept").expect("select"), "7");
        server.restart();
        assert_eq!(server.psql("SELECT v FROM kept").expect("select"), "7");
        if server.has_pg_stat_statements() {
            server
                .psql("SELECT count(*) FROM pg_stat_statements")
                .expect("pg_stat_statements is loaded");
        }
    }
}
