//! End-to-end: `delayq serve` and `delayq node --listen` serve the API, the dashboard and
//! /metrics from the binary, configured by flags, cluster.yaml and the environment.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{http_call, logged_http_url, wait_until, Env};
use serde_json::json;

/// A running `delayq serve`, killed when dropped.
struct Serve {
    child: Child,
    stderr: Arc<Mutex<String>>,
    url: String,
}

impl Serve {
    fn start(env: &Env, args: &[&str], envs: &[(&str, &str)]) -> Serve {
        let mut command = env.command(&["serve"]);
        command.args(args).envs(envs.iter().copied());
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn delayq serve");
        let pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut text = sink.lock().expect("stderr lock");
                text.push_str(&line);
                text.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            if let Some(url) = logged_http_url(&stderr.lock().expect("stderr lock")) {
                break url;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "delayq serve exited with {status}: {}",
                    stderr.lock().expect("lock")
                );
            }
            assert!(
                Instant::now() < deadline,
                "delayq serve did not listen: {}",
                stderr.lock().expect("lock")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Serve { child, stderr, url }
    }

    fn terminate_and_wait(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "serve did not stop: {}",
                self.stderr.lock().expect("lock")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_speaks_the_cli_objects_behind_a_token_and_joins_no_cluster() {
    let env = Env::start("");
    let serve = Serve::start(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[("DELAYQ_HTTP_TOKEN", "t0ken")],
    );
    assert!(serve.url.starts_with("http://127.0.0.1:"), "{}", serve.url);
    let task_url = format!("{}/v1/queues/orders/tasks/o-7", serve.url);
    assert_eq!(http_call("GET", &task_url, None, None).0, 401);
    let (status, scheduled) = http_call(
        "PUT",
        &task_url,
        Some("t0ken"),
        Some(json!({"in": "1h", "payload": "{\"order\":7}"})),
    );
    assert_eq!(status, 200, "{scheduled}");
    assert_eq!(scheduled["replaced"], false);

    // The HTTP object and the CLI's --json are the same object.
    let (_, over_http) = http_call("GET", &task_url, Some("t0ken"), None);
    assert_eq!(over_http, env.json(&["get", "orders", "o-7"]));
    let (_, stats) = http_call(
        "GET",
        &format!("{}/v1/queues", serve.url),
        Some("t0ken"),
        None,
    );
    assert_eq!(stats, env.json(&["stats", "--json"]));
    assert_eq!(
        env.json(&["nodes", "--json"]),
        json!([]),
        "serve joins no cluster"
    );
    let (status, ready) = http_call("GET", &format!("{}/readyz", serve.url), None, None);
    assert_eq!(
        (status, ready["member"].clone()),
        (200, json!(false)),
        "{ready}"
    );
    let (status, page) = http_call("GET", &format!("{}/", serve.url), None, None);
    assert_eq!(status, 200);
    assert!(page
        .as_str()
        .is_some_and(|html| html.contains("<title>delayq</title>")));
    let (_, cancelled) = http_call("DELETE", &task_url, Some("t0ken"), None);
    assert_eq!(cancelled, json!({"cancelled": true}));
    assert_eq!(serve.terminate_and_wait(), Some(0));
}

#[test]
fn node_listen_from_the_config_serves_metrics_of_its_fires_and_honours_read_only() {
    let env = Env::start("http:\n  listen: 127.0.0.1:0\n  read_only: true\n");
    let node = env.spawn_node("web", &[]);
    let url = logged_http_url(&node.stderr_text()).expect("the node logged its URL");
    for index in 0..5 {
        env.json(&["schedule", "ticks", &format!("t{index}"), "--in", "0s"]);
    }
    wait_until(
        Duration::from_secs(30),
        "5 fires",
        || node.fires.distinct() == 5,
        || format!("{}", node.fires.len()),
    );
    let metrics_url = format!("{url}/metrics");
    let scrape = || {
        http_call("GET", &metrics_url, None, None)
            .1
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    wait_until(
        Duration::from_secs(10),
        "the fires in /metrics",
        || {
            let text = scrape();
            text.contains("delayq_tasks_fired_total{queue=\"ticks\"} 5")
                && text.contains("delayq_tasks_completed_total{queue=\"ticks\",outcome=\"ok\"} 5")
        },
        scrape,
    );
    let text = scrape();
    assert!(
        text.contains("delayq_fire_lateness_seconds_bucket{queue=\"ticks\",le=\"0.001\"}"),
        "{text}"
    );
    let (status, nodes) = http_call("GET", &format!("{url}/v1/nodes"), None, None);
    assert_eq!(status, 200);
    assert_eq!(
        nodes[0]["id"].as_str(),
        Some(node.node_id().as_str()),
        "{nodes}"
    );
    assert_eq!(
        http_call("GET", &format!("{url}/readyz"), None, None).0,
        200
    );
    let (status, refused) = http_call(
        "PUT",
        &format!("{url}/v1/queues/ticks/tasks/x"),
        None,
        Some(json!({"delay_ms": 1})),
    );
    assert_eq!(status, 403, "{refused}");
}

#[test]
fn a_bad_listen_address_is_a_usage_error() {
    let env = Env::start("");
    let output = env.run(&["serve", "--listen", "nowhere"]);
    assert_eq!(output.status.code(), Some(2));
    let env = Env::start("http:\n  listen: nowhere:x\n");
    let output = env.run(&["serve"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("http.listen") && stderr.contains("nowhere:x"),
        "{stderr}"
    );
}
