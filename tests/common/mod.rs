//! Harness of the end-to-end tests: a private redis-server, a cluster.yaml with short periods,
//! `delayq` invocations with a deadline, and `delayq node` processes whose stdout lines are
//! collected as they come and which are killed when the test ends (pass or fail).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod fault_proxy;
pub mod recorder;

use delayq_testkit::{PostgresServer, RedisServer};
use serde::Deserialize;
use serde_json::Value;

/// The binary under test.
pub const DELAYQ: &str = env!("CARGO_BIN_EXE_delayq");

/// How long one short `delayq` command may take before the test fails.
const COMMAND_DEADLINE: Duration = Duration::from_secs(60);

/// The periods every end-to-end cluster runs with: failures are noticed within a second or
/// two, so the tests stay short.
pub const BASE_CONFIG: &str = "\
node:
  name: e2e
  heartbeat_period: 200ms
  heartbeat_ttl: 1s
  start_timeout: 5s
engine:
  pull_period: 200ms
  prefetch_window: 2s
  lease: 2s
  shutdown_grace: 3s
  executed_retention: 10m
";

/// One line of `delayq node --handler log`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Fired {
    pub queue: String,
    pub id: String,
    pub due_ms: u64,
    pub fired_ms: u64,
    pub attempt: u32,
    pub node: String,
}

/// The server an [`Env`] runs on.
pub enum Server {
    /// A private redis-server.
    Redis(RedisServer),
    /// A private PostgreSQL (`backend: postgres`).
    Postgres(PostgresServer),
}

/// A private server and a cluster.yaml pointing at it (under a unique key prefix on Redis).
pub struct Env {
    pub server: Server,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Env {
    /// [`BASE_CONFIG`] plus `queues_yaml` on a private PostgreSQL (`backend: postgres`,
    /// delayq's tables in the schema `delayq`).
    pub fn start_postgres(queues_yaml: &str) -> Self {
        let postgres = PostgresServer::start();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("cluster.yaml");
        // The lease must exceed three statement timeouts (config rule): 1 s and 3.5 s.
        let base = BASE_CONFIG.replace("lease: 2s", "lease: 3500ms");
        let yaml = format!(
            "backend: postgres\npostgres:\n  url: {}\n  statement_timeout: 1s\n{base}{queues_yaml}",
            postgres.url()
        );
        std::fs::write(&config, yaml).expect("write cluster.yaml");
        Env {
            server: Server::Postgres(postgres),
            dir,
            config,
        }
    }

    /// The redis-server of a Redis environment.
    pub fn redis(&self) -> &RedisServer {
        match &self.server {
            Server::Redis(redis) => redis,
            Server::Postgres(_) => panic!("this environment runs on PostgreSQL"),
        }
    }

    /// The redis-server of a Redis environment, to stop or restart it.
    pub fn redis_mut(&mut self) -> &mut RedisServer {
        match &mut self.server {
            Server::Redis(redis) => redis,
            Server::Postgres(_) => panic!("this environment runs on PostgreSQL"),
        }
    }

    /// The PostgreSQL server of a PostgreSQL environment.
    pub fn postgres(&mut self) -> &mut PostgresServer {
        match &mut self.server {
            Server::Postgres(postgres) => postgres,
            Server::Redis(_) => panic!("this environment runs on Redis"),
        }
    }
    /// [`BASE_CONFIG`] plus `queues_yaml` (extra top-level sections such as `queue_defaults:`).
    pub fn start(queues_yaml: &str) -> Self {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("cluster.yaml");
        let prefix = format!("e2e{}", std::process::id());
        let yaml = format!(
            "redis:\n  url: {}\n  key_prefix: {prefix}\n  response_timeout: 600ms\n{BASE_CONFIG}{queues_yaml}",
            redis.url()
        );
        std::fs::write(&config, yaml).expect("write cluster.yaml");
        Env {
            server: Server::Redis(redis),
            dir,
            config,
        }
    }

    /// A `delayq --config <ours> args...` command, run in the temporary directory with a
    /// clean environment for delayq's variables.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = delayq_command(self.dir.path());
        command.arg("--config").arg(&self.config).args(args);
        command
    }

    /// Runs `delayq args...` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        run_with_deadline(self.command(args), None)
    }

    /// Runs `delayq args...` with `stdin` as its input.
    pub fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_with_deadline(self.command(args), Some(stdin))
    }

    /// Runs `delayq args...`, expects exit 0 and returns stdout parsed as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let output = self.run(args);
        assert_success(&output, args);
        parse_json(&output.stdout)
    }

    /// Starts `delayq node args...` and waits until it runs.
    pub fn spawn_node(&self, label: &str, args: &[&str]) -> NodeProcess {
        let mut command = self.command(&["node"]);
        command.args(args);
        NodeProcess::spawn(label, command)
    }

    /// Starts `delayq node args...` under `ulimit -n open_files` (through `sh`, so no
    /// `pre_exec` in the tests) and waits until it runs.
    pub fn spawn_node_with_open_files(
        &self,
        label: &str,
        open_files: u32,
        args: &[&str],
    ) -> NodeProcess {
        let mut command = Command::new("sh");
        command
            .current_dir(self.dir.path())
            .arg("-c")
            .arg(format!("ulimit -n {open_files} && exec \"$0\" \"$@\""))
            .arg(DELAYQ)
            .arg("--config")
            .arg(&self.config)
            .arg("node")
            .args(args);
        for (name, value) in delayq_command(self.dir.path()).get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        NodeProcess::spawn(label, command)
    }

    /// Starts `delayq node --listen 127.0.0.1:0 --handler exec -- sh -c SCRIPT` under
    /// `ulimit -n open_files`, waits until it is a member, and returns it with its HTTP URL.
    pub fn spawn_exec_node_with_open_files(
        &self,
        label: &str,
        open_files: u32,
        script: &str,
    ) -> (NodeProcess, String) {
        let args = [
            "--listen",
            "127.0.0.1:0",
            "--handler",
            "exec",
            "--",
            "sh",
            "-c",
            script,
        ];
        let node = self.spawn_node_with_open_files(label, open_files, &args);
        node.wait_for_stderr("url=http://", Duration::from_secs(30));
        let url = logged_http_url(&node.stderr_text()).expect("the logged URL");
        self.wait_for_members(1);
        (node, url)
    }

    /// Starts `count` `delayq node` processes (`node-0`, ...) whose fires go to `fires`, and
    /// waits until all of them are members.
    pub fn start_nodes(&self, count: usize, fires: &FireLog) -> Vec<NodeProcess> {
        let nodes: Vec<NodeProcess> = (0..count)
            .map(|index| {
                NodeProcess::spawn_into(
                    &format!("node-{index}"),
                    self.command(&["node"]),
                    fires.clone(),
                )
            })
            .collect();
        self.wait_for_members(count);
        nodes
    }

    /// Waits until `delayq nodes --json` lists `count` live nodes.
    pub fn wait_for_members(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let nodes = self.json(&["nodes", "--json"]);
            let live = nodes.as_array().map_or(0, Vec::len);
            if live == count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "expected {count} live nodes, `delayq nodes` shows {live}: {nodes}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `delayq stats --json` for `queue` (zeros when the queue is unknown).
    pub fn stats(&self, queue: &str) -> BTreeMap<String, u64> {
        let stats = self.json(&["stats", "--json"]);
        let mut counts = BTreeMap::new();
        for key in [
            "pending",
            "due_now",
            "inflight",
            "dead",
            "done",
            "held_back",
        ] {
            let value = stats[queue][key].as_u64().unwrap_or(0);
            counts.insert(key.to_owned(), value);
        }
        counts
    }

    /// Waits until `count` distinct tasks of `fires` fired, then until the queue settled
    /// (nothing pending or in flight, `count` done), after which nothing can fire again.
    pub fn wait_for_every_fire(
        &self,
        fires: &FireLog,
        queue: &str,
        count: usize,
        timeout: Duration,
    ) {
        wait_until(
            timeout,
            "every task to fire",
            || fires.distinct() == count,
            || format!("{} of {count} fired", fires.distinct()),
        );
        self.wait_until_settled(queue, count as u64, Duration::from_secs(30));
    }

    /// Waits until `queue` has nothing pending or in flight and `done` completed tasks: after
    /// that no task of the queue can fire again.
    pub fn wait_until_settled(&self, queue: &str, done: u64, deadline: Duration) {
        let until = Instant::now() + deadline;
        loop {
            let counts = self.stats(queue);
            if counts["pending"] == 0 && counts["inflight"] == 0 && counts["done"] >= done {
                return;
            }
            assert!(
                Instant::now() < until,
                "queue {queue} did not settle with {done} done: {counts:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A `delayq` command in `dir` without any of delayq's environment overrides.
pub fn delayq_command(dir: &Path) -> Command {
    let mut command = Command::new(DELAYQ);
    command
        .current_dir(dir)
        .env_remove("DELAYQ_REDIS_URL")
        .env_remove("DELAYQ_BACKEND")
        .env_remove("DELAYQ_POSTGRES_URL")
        .env_remove("DELAYQ_KEY_PREFIX")
        .env_remove("DELAYQ_NODE_NAME")
        .env_remove("DELAYQ_CONFIG")
        .env_remove("DELAYQ_WEBHOOK_SECRETS")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("TRACEPARENT")
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_BACKTRACE", "1");
    command
}

/// Runs `command` with `stdin`, failing the test when it takes longer than a minute.
pub fn run_with_deadline(mut command: Command, stdin: Option<&[u8]>) -> Output {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn delayq");
    let feeder = stdin.map(|input| {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        })
    });
    let stdout = drain(child.stdout.take().expect("stdout is piped"));
    let stderr = drain(child.stderr.take().expect("stderr is piped"));
    let deadline = Instant::now() + COMMAND_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll delayq") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {COMMAND_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(feeder) = feeder {
        let _ = feeder.join();
    }
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Fails the test with the command's stderr unless it exited 0.
pub fn assert_success(output: &Output, args: &[&str]) {
    assert!(
        output.status.success(),
        "delayq {args:?} failed with {}: stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Parses one JSON document.
pub fn parse_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {:?}", String::from_utf8_lossy(bytes)))
}

/// Now on this machine's clock in ms (the cluster clock is Redis's, on the same machine).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// Polls `condition` every 50 ms until it holds; fails with `what` and `detail()` after
/// `timeout`.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}: {}",
            detail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every fire seen on the stdout of every node process of a test, in arrival order.
#[derive(Clone, Default)]
pub struct FireLog(Arc<Mutex<Vec<Fired>>>);

impl FireLog {
    /// A copy of all fires so far.
    pub fn snapshot(&self) -> Vec<Fired> {
        self.0.lock().expect("fire log lock").clone()
    }

    /// How many fires so far.
    pub fn len(&self) -> usize {
        self.0.lock().expect("fire log lock").len()
    }

    /// The number of distinct `(queue, id)` fired so far.
    pub fn distinct(&self) -> usize {
        let fires = self.0.lock().expect("fire log lock");
        let mut ids: Vec<(&str, &str)> = fires
            .iter()
            .map(|fire| (fire.queue.as_str(), fire.id.as_str()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    fn push(&self, fire: Fired) {
        self.0.lock().expect("fire log lock").push(fire);
    }
}

/// A running `delayq node`: its stdout lines go to a [`FireLog`], its stderr is kept for
/// failure messages. Dropping it kills the process (SIGKILL) and reaps it.
pub struct NodeProcess {
    pub label: String,
    child: Child,
    pub fires: FireLog,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl NodeProcess {
    /// Spawns `command` (a `delayq node`) and waits until it logs that it runs.
    pub fn spawn(label: &str, command: Command) -> Self {
        Self::spawn_into(label, command, FireLog::default())
    }

    /// Like [`NodeProcess::spawn`], collecting fires into `fires` (shared by several nodes).
    pub fn spawn_into(label: &str, mut command: Command, fires: FireLog) -> Self {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn delayq node");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr_pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        {
            let fires = fires.clone();
            let stderr = stderr.clone();
            let label = label.to_owned();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    match serde_json::from_str::<Fired>(&line) {
                        Ok(fire) => fires.push(fire),
                        Err(error) => stderr.lock().expect("stderr lock").push_str(&format!(
                            "[{label}] unparsable stdout line {line:?}: {error}\n"
                        )),
                    }
                }
            }));
        }
        {
            let stderr = stderr.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stderr_pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut text = stderr.lock().expect("stderr lock");
                    text.push_str(&line);
                    text.push('\n');
                }
            }));
        }
        let mut node = NodeProcess {
            label: label.to_owned(),
            child,
            fires,
            stderr,
            readers,
        };
        node.wait_running();
        node
    }

    /// Waits until the node's stderr contains `needle`.
    pub fn wait_for_stderr(&self, needle: &str, timeout: Duration) {
        wait_until(
            timeout,
            &format!("{needle:?} on the stderr of {}", self.label),
            || self.stderr_text().contains(needle),
            || self.stderr_text(),
        );
    }

    fn wait_running(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.stderr_text().contains("delayq node running") {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "node {} exited with {status} while starting: {}",
                    self.label,
                    self.stderr_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not start: {}",
                self.label,
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The node id it logged at start.
    pub fn node_id(&self) -> String {
        node_id_in_log(&self.stderr_text())
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Sends SIGTERM (graceful shutdown).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.pid());
    }

    /// SIGKILL (a crash), then reaps the process and waits for its output to be read.
    pub fn crash(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }

    /// Waits for the process to exit; `None` after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// JSON lines for `delayq schedule QUEUE --from -`: `count` tasks `t0..` with delays
/// drawn from `delays_ms` under `seed`.
pub fn task_lines(count: usize, delays_ms: std::ops::Range<u64>, seed: u64) -> String {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut text = String::with_capacity(count * 40);
    for index in 0..count {
        let delay = rng.random_range(delays_ms.clone());
        text.push_str(&format!("{{\"id\":\"t{index}\",\"delay_ms\":{delay}}}\n"));
    }
    text
}

/// Loads `lines` into `queue` and checks the summary: all scheduled, none failed.
pub fn load_tasks(env: &Env, queue: &str, lines: &str, expected: u64) {
    let args = ["schedule", queue, "--from", "-"];
    let output = env.run_with_stdin(&args, lines.as_bytes());
    assert_success(&output, &args);
    let summary = parse_json(&output.stdout);
    assert_eq!(summary["scheduled"], expected, "summary {summary}");
    assert_eq!(summary["failed"], 0, "summary {summary}");
}

/// Groups fires by task id.
pub fn by_id(fires: &[Fired]) -> BTreeMap<String, Vec<Fired>> {
    let mut grouped: BTreeMap<String, Vec<Fired>> = BTreeMap::new();
    for fire in fires {
        grouped
            .entry(fire.id.clone())
            .or_default()
            .push(fire.clone());
    }
    grouped
}

/// The lateness percentiles of `fires` (fired - due), for the test's log.
pub fn lateness_summary(fires: &[Fired]) -> String {
    let mut lateness: Vec<u64> = fires
        .iter()
        .map(|fire| fire.fired_ms.saturating_sub(fire.due_ms))
        .collect();
    if lateness.is_empty() {
        return "no fires".to_owned();
    }
    lateness.sort_unstable();
    let at = |q: f64| lateness[((lateness.len() - 1) as f64 * q) as usize];
    format!(
        "lateness ms: p50 {} p90 {} p99 {} max {} over {} fires",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        lateness.len()
    )
}

/// The `url=http://ADDR/` a `delayq node --listen` or `delayq serve` logged, without the
/// trailing slash; `None` until it is logged.
pub fn logged_http_url(stderr: &str) -> Option<String> {
    let start = stderr.find("url=http://")? + "url=".len();
    let url = stderr[start..].split_whitespace().next()?;
    Some(url.trim_matches('"').trim_end_matches('/').to_owned())
}

/// One HTTP request with an optional bearer token and JSON body; returns the status and the
/// body (JSON when it parses, else a string).
pub fn http_call(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the HTTP client");
    runtime.block_on(async {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = reqwest::Client::new()
            .request(method, url)
            .timeout(Duration::from_secs(30));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the HTTP server answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    })
}

/// Waits until `delayq dead QUEUE --json` lists `count` dead letters and returns them.
pub fn wait_for_dead(env: &Env, queue: &str, count: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dead = env.json(&["dead", queue, "--json", "--limit", "100"]);
        if dead.as_array().map_or(0, Vec::len) == count {
            return dead;
        }
        assert!(
            Instant::now() < deadline,
            "expected {count} dead letters in {queue}: {dead}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The node id a `delayq node` logged at start (`delayq node running ... node=<id>`), found in
/// its stderr `text`.
pub fn node_id_in_log(text: &str) -> String {
    let line = text
        .lines()
        .find(|line| line.contains("delayq node running"))
        .expect("the start line");
    let start = line.find("node=").expect("a node= field") + "node=".len();
    line[start..]
        .split_whitespace()
        .next()
        .expect("a node id")
        .trim_matches('"')
        .to_owned()
}

/// Reads the headers of an HTTP/1.1 request from `reader` (its request line already read, or
/// not: header lines are only searched for `Content-Length`) and then its body; `None` when the
/// connection ended before the whole body arrived. For the tests' minimal local HTTP servers.
pub fn read_http_body(reader: &mut impl std::io::BufRead) -> Option<Vec<u8>> {
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}
