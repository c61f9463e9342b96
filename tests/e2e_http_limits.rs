//! End-to-end: the HTTP server of `delayq node --listen` against slow and idle clients
//! (`http.header_timeout`, `http.request_timeout`, `http.max_connections`). A client that
//! never finishes its request head, or idles on a kept-alive connection, is disconnected; a
//! request whose body never arrives is answered 503; connections beyond the limit wait; and
//! 400 silent sockets under `ulimit -n 256` do not stop the node from firing or heartbeating.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{http_call, logged_http_url, wait_until, Env, NodeProcess};

/// Starts `delayq node --listen 127.0.0.1:0 ARGS` and returns it with its `ADDR` (no scheme).
fn node_with_http(env: &Env, args: &[&str]) -> (NodeProcess, String) {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let node = env.spawn_node("http", &all);
    node.wait_for_stderr("url=http://", Duration::from_secs(30));
    let url = logged_http_url(&node.stderr_text()).expect("the logged URL");
    let addr = url.trim_start_matches("http://").to_owned();
    (node, addr)
}

/// A connection to `addr` whose reads give up after `timeout`.
fn connect(addr: &str, timeout: Duration) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect to the node");
    stream
        .set_read_timeout(Some(timeout))
        .expect("set a read timeout");
    stream
}

/// How a read ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The server closed the connection (end of file or reset) after the bytes read.
    Closed(Vec<u8>),
    /// The read timeout passed with the connection still open.
    StillOpen(Vec<u8>),
}

/// Reads until the server closes the connection or `stream`'s read timeout passes.
fn read_until_closed(stream: &mut TcpStream) -> Ended {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Ended::Closed(bytes),
            Ok(read) => bytes.extend_from_slice(&buffer[..read]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ended::StillOpen(bytes)
            }
            Err(_) => return Ended::Closed(bytes),
        }
    }
}

/// Reads one whole response (head and `Content-Length` body) without waiting for the close;
/// `None` when the connection ended or the read timeout passed first.
fn read_response(stream: &mut TcpStream) -> Option<String> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                return Some(text);
            }
        }
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return None,
            Ok(read) => bytes.extend_from_slice(&buffer[..read]),
        }
    }
}

fn request(path: &str, addr: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n")
}

#[test]
fn slow_heads_idle_keep_alives_and_unfinished_bodies_are_cut_off() {
    let env = Env::start("http:\n  header_timeout: 1s\n  request_timeout: 2s\n");
    let (_node, addr) = node_with_http(&env, &["--handler", "log"]);
    let header_timeout = Duration::from_secs(1);

    // Three clients at once: one sends nothing, one half a request line, one a whole request
    // and then idles on the kept-alive connection.
    let silent = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut stream = connect(&addr, Duration::from_secs(10));
            let start = Instant::now();
            (read_until_closed(&mut stream), start.elapsed())
        })
    };
    let half = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut stream = connect(&addr, Duration::from_secs(10));
            stream.write_all(b"GET /heal").expect("write half a line");
            let start = Instant::now();
            (read_until_closed(&mut stream), start.elapsed())
        })
    };
    let idle = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut stream = connect(&addr, Duration::from_secs(10));
            stream
                .write_all(request("/healthz", &addr).as_bytes())
                .expect("write a request");
            let answer = read_response(&mut stream).unwrap_or_default();
            let start = Instant::now();
            (answer, read_until_closed(&mut stream), start.elapsed())
        })
    };
    for (what, (ended, elapsed)) in [
        ("silent", silent.join().expect("silent client")),
        ("half a request line", half.join().expect("half client")),
    ] {
        assert_eq!(
            ended,
            Ended::Closed(Vec::new()),
            "{what}: closed, no answer"
        );
        assert!(
            elapsed >= header_timeout.mul_f64(0.9) && elapsed <= Duration::from_secs(5),
            "{what}: closed after {elapsed:?}, expected about {header_timeout:?}"
        );
        eprintln!("{what}: closed after {elapsed:?}");
    }
    let (answer, ended, elapsed) = idle.join().expect("idle client");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(ended, Ended::Closed(Vec::new()), "idle keep-alive: closed");
    assert!(
        elapsed >= header_timeout.mul_f64(0.9) && elapsed <= Duration::from_secs(5),
        "idle keep-alive: closed after {elapsed:?}, expected about {header_timeout:?}"
    );
    eprintln!("idle keep-alive: closed after {elapsed:?}");

    // A body announced and never sent: 503 after about request_timeout.
    let mut stream = connect(&addr, Duration::from_secs(10));
    let head = format!(
        "PUT /v1/queues/slow/tasks/t1 HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"in\":"
    );
    stream.write_all(head.as_bytes()).expect("write the head");
    let start = Instant::now();
    let answer = read_response(&mut stream).expect("an answer");
    let elapsed = start.elapsed();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("http.request_timeout"), "{answer}");
    assert!(
        elapsed >= Duration::from_millis(1800) && elapsed <= Duration::from_secs(6),
        "answered after {elapsed:?}, expected about 2s"
    );
    eprintln!("unfinished body: 503 after {elapsed:?}");
    let get = env.run(&["get", "slow", "t1"]);
    assert!(
        get.status.code() == Some(1) && String::from_utf8_lossy(&get.stderr).contains("not found"),
        "nothing was scheduled: {get:?}"
    );

    // And the server still answers.
    let (status, _) = http_call("GET", &format!("http://{addr}/healthz"), None, None);
    assert_eq!(status, 200);
}

#[test]
fn connections_beyond_max_connections_wait_until_one_closes() {
    let env = Env::start("http:\n  header_timeout: 30s\n  max_connections: 4\n");
    let (_node, addr) = node_with_http(&env, &["--handler", "log"]);
    let held: Vec<TcpStream> = (0..4)
        .map(|_| connect(&addr, Duration::from_secs(1)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));

    // The fifth is not served while four are open.
    let mut fifth = connect(&addr, Duration::from_millis(1500));
    fifth
        .write_all(request("/healthz", &addr).as_bytes())
        .expect("write a request");
    assert_eq!(
        read_until_closed(&mut fifth),
        Ended::StillOpen(Vec::new()),
        "the fifth connection is not served while four are open"
    );

    // Once they close, it is.
    drop(held);
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set a read timeout");
    let start = Instant::now();
    let answer = read_response(&mut fifth).expect("an answer once a slot frees");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    eprintln!(
        "fifth connection served {:?} after the others closed",
        start.elapsed()
    );
    let (status, _) = http_call("GET", &format!("http://{addr}/healthz"), None, None);
    assert_eq!(status, 200);
}

/// How many silent sockets the test opens against a node limited to 256 open files.
const SILENT_SOCKETS: usize = 400;
/// How many tasks must still fire meanwhile.
const TASKS: usize = 50;

/// Without the connection limit (checked by hand: `max_connections: 100000` and the
/// open-files cap taken out) the node accepted until it ran out of descriptors: 0 of the 50
/// tasks ran, every attempt failed with `cannot run "sh": Too many open files` and went to
/// the dead letters, while the accept loop backed off (one warning per 10 s, about 19 errors
/// a second). With the limit they run within half a second.
#[test]
fn four_hundred_silent_sockets_under_ulimit_256_do_not_stop_the_node() {
    // A long header_timeout: only the connection limit protects the node here.
    let env = Env::start("http:\n  header_timeout: 120s\nqueues:\n  fd:\n    partitions: 4\n");
    let ran = env.dir.path().join("ran");
    std::fs::create_dir_all(&ran).expect("the ran directory");
    let script = format!("touch {}/\"$DELAYQ_ID\"", ran.display());
    let (node, url) = env.spawn_exec_node_with_open_files("limited", 256, &script);
    let addr = url.trim_start_matches("http://").to_owned();
    assert!(
        node.stderr_text().contains("http.max_connections lowered"),
        "the limit is kept to half of 256 open files: {}",
        node.stderr_text()
    );

    // 128 are served, the rest wait in the listen backlog (1024).
    let target = addr.parse().expect("a socket address");
    let silent: Vec<TcpStream> = (0..SILENT_SOCKETS)
        .map(|index| {
            TcpStream::connect_timeout(&target, Duration::from_secs(5))
                .unwrap_or_else(|error| panic!("silent socket {index}: {error}"))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    let due = common::now_ms() + 300;
    let lines: String = (0..TASKS)
        .map(|index| format!("{{\"id\":\"f{index}\",\"due_ms\":{due}}}\n"))
        .collect();
    let start = Instant::now();
    common::load_tasks(&env, "fd", &lines, TASKS as u64);
    let count_ran = || std::fs::read_dir(&ran).map_or(0, |dir| dir.count());
    wait_until(
        Duration::from_secs(30),
        "every task to run",
        || count_ran() == TASKS,
        || format!("{} of {TASKS} ran: {}", count_ran(), node.stderr_text()),
    );
    eprintln!(
        "{TASKS} tasks ran {:?} after scheduling, {SILENT_SOCKETS} silent sockets open",
        start.elapsed()
    );
    env.wait_until_settled("fd", TASKS as u64, Duration::from_secs(30));
    // Still a member: its heartbeat kept going while the sockets were held.
    env.wait_for_members(1);
    let stderr = node.stderr_text();
    assert!(
        !stderr.contains("Too many open files"),
        "the node never ran out of files: {stderr}"
    );

    drop(silent);
    let (status, _) = http_call("GET", &format!("{url}/healthz"), None, None);
    assert_eq!(status, 200, "the API serves again once the sockets close");
}
