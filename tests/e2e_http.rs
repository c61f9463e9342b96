//! End-to-end: `delayq serve` and `delayq node --listen` serve the API, the dashboard and
//! /metrics from the binary, configured by flags, cluster.yaml and the environment.

mod common;
mod e2e_http_support;

use std::time::Duration;

use common::{http_call, logged_http_url, wait_until, Env, NodeProcess};
use e2e_http_support::{Serve, WAIT};
use serde_json::json;

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
    // A bulk load answers like `delayq schedule --from`; a malformed item, which the CLI
    // reports by its line and skips, refuses the whole HTTP body naming its index.
    let lines = [
        json!({"id": "b-1", "delay_ms": 3_600_000}),
        json!({"id": "b-2", "in": "soon"}),
        json!({"id": "b-3", "due_ms": 4_102_444_800_000u64}),
    ];
    let file = env.dir.path().join("bulk.jsonl");
    let text: Vec<String> = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(&file, text.concat()).expect("write the lines");
    let output = env.run(&["schedule", "bulk-cli", "--from", &file.to_string_lossy()]);
    let from_cli: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a summary");
    let bulk_url = format!("{}/v1/queues/bulk-http/tasks", serve.url);
    let (status, refused) = http_call("POST", &bulk_url, Some("t0ken"), Some(json!(lines)));
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|error| error.contains("index 1") && error.contains("soon")),
        "{refused}"
    );
    let good = [lines[0].clone(), lines[2].clone()];
    let (status, over_http) = http_call("POST", &bulk_url, Some("t0ken"), Some(json!(good)));
    assert_eq!(status, 200, "{over_http}");
    for key in ["scheduled", "replaced", "duplicates", "kept"] {
        assert_eq!(
            over_http[key], from_cli[key],
            "{key}: {from_cli} vs {over_http}"
        );
    }
    assert_eq!(from_cli["failed"], 1, "{from_cli}");
    assert_eq!(over_http["failed"], 0, "{over_http}");

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

#[test]
fn serve_follows_nodes_joining_and_leaving_and_never_shows_the_redis_password() {
    let password = "pa55-w0rd-never-shown";
    let mut env = Env::start("");
    env.redis()
        .command(&["CONFIG", "SET", "requirepass", password])
        .expect("set a password");
    let url = format!("redis://:{password}@127.0.0.1:{}/0", env.redis().port());
    let serve = Serve::start(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[("DELAYQ_REDIS_URL", url.as_str())],
    );
    let get = |path: &str| http_call("GET", &format!("{}{path}", serve.url), None, None);
    assert_eq!(get("/v1/nodes").1, json!([]));

    // A node that joins after `serve` started shows up, and goes when it leaves.
    let mut command = env.command(&["node"]);
    command.env("DELAYQ_REDIS_URL", &url);
    let mut node = NodeProcess::spawn("joiner", command);
    let id = node.node_id();
    wait_until(
        WAIT,
        "the node in /v1/nodes",
        || get("/v1/nodes").1[0]["id"].as_str() == Some(id.as_str()),
        || get("/v1/nodes").1.to_string(),
    );
    let (status, _) = http_call(
        "PUT",
        &format!("{}/v1/queues/q/tasks/a", serve.url),
        None,
        Some(json!({"delay_ms": 0})),
    );
    assert_eq!(status, 200);
    wait_until(
        WAIT,
        "the task to fire",
        || node.fires.len() == 1,
        String::new,
    );
    let mut seen = String::new();
    for path in ["/v1/nodes", "/v1/queues", "/", "/readyz", "/metrics"] {
        let (status, body) = get(path);
        assert_eq!(status, 200, "{path}: {body}");
        seen.push_str(&body.to_string());
    }
    node.terminate();
    assert!(node.wait_exit(WAIT).is_some_and(|status| status.success()));
    wait_until(
        WAIT,
        "the node gone from /v1/nodes",
        || get("/v1/nodes").1 == json!([]),
        || get("/v1/nodes").1.to_string(),
    );

    // Redis gone: 503s, and a command's error, without the password.
    env.redis_mut().stop();
    for path in ["/v1/queues", "/v1/nodes", "/readyz"] {
        let (status, body) = get(path);
        assert_eq!(status, 503, "{path}: {body}");
        seen.push_str(&body.to_string());
    }
    let mut stats = env.command(&["stats"]);
    stats.env("DELAYQ_REDIS_URL", &url);
    let output = common::run_with_deadline(stats, None);
    assert_eq!(output.status.code(), Some(1));
    seen.push_str(&String::from_utf8_lossy(&output.stderr));
    seen.push_str(&serve.stderr_text());
    seen.push_str(&node.stderr_text());
    assert!(!seen.contains(password), "the password leaked: {seen}");
}

#[test]
fn the_listen_address_comes_from_the_flag_the_environment_or_defaults_to_loopback() {
    // The environment beats the file, the flag beats both.
    let env = Env::start("http:\n  listen: 192.0.2.1:7070\n");
    let serve = Serve::start(&env, &[], &[("DELAYQ_HTTP_LISTEN", "127.0.0.1:0")]);
    assert!(serve.url.starts_with("http://127.0.0.1:"), "{}", serve.url);
    let flagged = Serve::start(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[("DELAYQ_HTTP_LISTEN", "192.0.2.1:7070")],
    );
    assert!(
        flagged.url.starts_with("http://127.0.0.1:"),
        "{}",
        flagged.url
    );

    // Nothing set: 127.0.0.1:7070 (listening, or failing to if the port is taken).
    let env = Env::start("");
    let mut child = env
        .command(&["serve"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn delayq serve");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + WAIT;
    let mut seen = String::new();
    while !seen.contains("127.0.0.1:7070") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => seen.push_str(&format!("{line}\n")),
            Err(_) => panic!("no 127.0.0.1:7070 in: {seen}"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(!seen.contains("0.0.0.0"), "{seen}");
}
