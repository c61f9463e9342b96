//! End-to-end: `delayq node --handler http` against a local server that answers 302 and 500,
//! with credentials in the URL. A redirect is not followed (reqwest's default would turn the
//! POST into a GET and ack a task that was never delivered), an endless error body is not
//! waited for, and the URL's secrets never reach `delayq get` or the node's output.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{read_http_body, wait_until, Env};
use serde_json::Value;

const QUEUES: &str = "\
queue_defaults:
  partitions: 4
  max_attempts: 2
  backoff: { initial: 100ms, max: 200ms }
  timeout: 5s
";

/// The secrets of the handler URL and of the redirect target: none may show anywhere.
const USER_SECRET: &str = "pw-in-userinfo-8b1f";
const QUERY_SECRET: &str = "token-in-query-4c2e";
const LOCATION_SECRET: &str = "token-in-location-9d7a";

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    queue: Option<String>,
}

/// A one-thread HTTP/1.1 server. POSTs of queue `moved` get a 302 to `/landing` on this
/// server (so a client following it would succeed there); POSTs of queue `broken` get a 500
/// whose body announces 10 MiB, sends 8 KiB and then stalls; anything else gets 200.
fn serve(listener: TcpListener, seen: Arc<Mutex<Vec<Request>>>) {
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = seen.clone();
            // A stalled answer must not hold up the next connection.
            std::thread::spawn(move || answer(stream, port, &seen));
        }
    });
}

fn answer(mut stream: TcpStream, port: u16, seen: &Mutex<Vec<Request>>) {
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let Some(body) = read_http_body(&mut reader) else {
        return;
    };
    let queue = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|json| json["queue"].as_str().map(str::to_owned));
    seen.lock().expect("requests lock").push(Request {
        method: method.clone(),
        path,
        queue: queue.clone(),
    });
    match (method.as_str(), queue.as_deref()) {
        ("POST", Some("moved")) => {
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{port}/landing?token={LOCATION_SECRET}\r\n\
                 content-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
        ("POST", Some("broken")) => {
            let _ = write!(
                stream,
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                10 << 20
            );
            let page = "the receiver is broken: database unavailable\n".repeat(8192 / 45 + 1);
            let _ = stream.write_all(page.as_bytes());
            let _ = stream.flush();
            // Never send the rest: a client reading the whole body hangs here.
            std::thread::sleep(Duration::from_secs(60));
        }
        _ => {
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
            );
        }
    }
}

fn assert_no_secret(text: &str, what: &str) {
    for secret in [USER_SECRET, QUERY_SECRET, LOCATION_SECRET] {
        assert!(
            !text.contains(secret),
            "{what} shows the secret {secret:?}: {text}"
        );
    }
}

#[test]
fn http_refuses_redirects_bounds_error_bodies_and_never_shows_url_secrets() {
    let env = Env::start(QUEUES);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    serve(listener, seen.clone());
    let url = format!("http://delayq:{USER_SECRET}@127.0.0.1:{port}/hook?token={QUERY_SECRET}");
    let node = env.spawn_node("http", &["--handler", "http", "--url", &url]);
    env.wait_for_members(1);

    env.json(&["schedule", "moved", "m1", "--in", "100ms"]);
    env.json(&["schedule", "broken", "b1", "--in", "100ms"]);
    env.json(&["schedule", "fine", "f1", "--in", "100ms"]);
    let get = |queue: &str, id: &str| env.json(&["get", queue, id]);
    for (queue, id, state) in [
        ("moved", "m1", "dead"),
        ("broken", "b1", "dead"),
        ("fine", "f1", "done"),
    ] {
        wait_until(
            Duration::from_secs(30),
            &format!("{queue}/{id} to be {state}"),
            || get(queue, id)["state"] == state,
            || format!("{} after requests {:?}", get(queue, id), seen.lock()),
        );
    }

    // The redirect: two POSTs (both attempts), never a GET of the Location.
    let requests = seen.lock().expect("requests lock").clone();
    let moved: Vec<&Request> = requests
        .iter()
        .filter(|request| {
            request.queue.as_deref() == Some("moved") || request.path.starts_with("/landing")
        })
        .collect();
    assert_eq!(
        moved.len(),
        2,
        "one POST per attempt and nothing else: {moved:?}"
    );
    assert!(
        moved
            .iter()
            .all(|request| request.method == "POST" && request.path.starts_with("/hook")),
        "{moved:?}"
    );
    let dead = get("moved", "m1");
    assert_eq!(dead["attempt"], 2, "{dead}");
    let last_error = dead["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("302")
            && last_error.contains(&format!("Location: http://127.0.0.1:{port}/landing?***"))
            && last_error.contains(&format!("POST http://***@127.0.0.1:{port}/hook?***")),
        "last_error names the status, the redacted Location and URL: {dead}"
    );

    // The endless 500: failed with the status and the start of the page, not a timeout.
    let dead = get("broken", "b1");
    let last_error = dead["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("500") && last_error.contains("database unavailable"),
        "{dead}"
    );
    assert!(
        !last_error.contains("timed out"),
        "the body was not waited for: {dead}"
    );
    assert!(
        last_error.len() < 1024,
        "a bounded excerpt: {} bytes",
        last_error.len()
    );

    // No secret in what users see.
    for (queue, id) in [("moved", "m1"), ("broken", "b1"), ("fine", "f1")] {
        let output = env.run(&["get", queue, id]);
        assert_no_secret(&String::from_utf8_lossy(&output.stdout), "`delayq get`");
        assert_no_secret(
            &String::from_utf8_lossy(&output.stderr),
            "`delayq get` stderr",
        );
    }
    let dead_list = env.run(&["dead", "moved", "--json"]);
    assert_no_secret(&String::from_utf8_lossy(&dead_list.stdout), "`delayq dead`");
    let stderr = node.stderr_text();
    assert!(
        stderr.contains("handler failed"),
        "the failures were logged: {stderr}"
    );
    assert_no_secret(&stderr, "the node's stderr");
    // Its stdout lines (none expected with --handler http) are in the same collector.
    assert_no_secret(&format!("{:?}", node.fires.snapshot()), "the node's stdout");
}
