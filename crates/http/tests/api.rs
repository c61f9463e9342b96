//! The task endpoints and the rules around them, against a real redis-server: the same
//! objects as the command line, every error status, the token and read-only mode.

mod support;

use serde_json::{json, Value};
use support::{config, eventually, options, producer, redis, serve, Api, Recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_get_cancel_answer_like_the_cli() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);

    let (status, first) = api
        .call(
            "PUT",
            "/v1/queues/orders/tasks/o-1",
            Some(json!({"in": "1h", "payload": "hi"})),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    let keys: Vec<&String> = first.as_object().expect("an object").keys().collect();
    assert_eq!(
        keys,
        ["due_ms", "duplicate", "id", "kept", "queue", "replaced"],
        "{first}"
    );
    assert_eq!(
        (first["queue"].clone(), first["replaced"].clone()),
        (json!("orders"), json!(false))
    );

    let (_, again) = api
        .call(
            "PUT",
            "/v1/queues/orders/tasks/o-1",
            Some(json!({"at": "2100-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(again["replaced"], true, "{again}");
    assert_eq!(again["due_ms"], 4_102_444_800_000u64);
    for body in [
        json!({"due_ms": 4_102_444_800_000u64}),
        json!({"delay_ms": 60_000}),
    ] {
        let (status, answer) = api
            .call("PUT", "/v1/queues/orders/tasks/o-2", Some(body))
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    let task = api.ok("/v1/queues/orders/tasks/o-1").await;
    assert_eq!(task["state"], "pending", "{task}");
    assert_eq!(task["due_ms"], 4_102_444_800_000u64);
    assert_eq!(
        task["payload"], "",
        "the replacement has no payload: {task}"
    );
    for key in [
        "queue",
        "id",
        "attempt",
        "generation",
        "last_error",
        "state_since_ms",
        "traceparent",
    ] {
        assert!(task.get(key).is_some(), "{key} in {task}");
    }

    let stats = api.ok("/v1/queues").await;
    assert_eq!(
        stats["orders"],
        json!({"pending": 2, "due_now": 0, "inflight": 0, "dead": 0, "done": 0, "held_back": 0, "paused": false})
    );

    let (status, cancelled) = api
        .call("DELETE", "/v1/queues/orders/tasks/o-1", None)
        .await;
    assert_eq!((status, cancelled), (200, json!({"cancelled": true})));
    let (_, again) = api
        .call("DELETE", "/v1/queues/orders/tasks/o-1", None)
        .await;
    assert_eq!(again, json!({"cancelled": false}));
    let (status, missing) = api.get("/v1/queues/orders/tasks/o-1").await;
    assert_eq!(status, 404);
    assert!(
        missing["error"].as_str().is_some_and(|e| e.contains("o-1")),
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_the_traceparent_of_the_request_that_scheduled_the_task() {
    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let send = |method: reqwest::Method, path: &str, body: Value| {
        api.client
            .request(method, format!("{}{path}", api.base))
            .header("traceparent", TRACE)
            .json(&body)
            .send()
    };
    let put = send(
        reqwest::Method::PUT,
        "/v1/queues/orders/tasks/traced",
        json!({"in": "1h"}),
    )
    .await
    .expect("the server answers");
    assert_eq!(put.status(), 200);
    let bulk = send(
        reqwest::Method::POST,
        "/v1/queues/orders/tasks",
        json!([{"id": "bulk-1", "delay_ms": 3_600_000}]),
    )
    .await
    .expect("the server answers");
    assert_eq!(bulk.status(), 200);
    let (status, _) = api
        .call(
            "PUT",
            "/v1/queues/orders/tasks/untraced",
            Some(json!({"in": "1h"})),
        )
        .await;
    assert_eq!(status, 200);

    for id in ["traced", "bulk-1"] {
        let task = api.ok(&format!("/v1/queues/orders/tasks/{id}")).await;
        assert_eq!(task["traceparent"], TRACE, "{task}");
    }
    let task = api.ok("/v1/queues/orders/tasks/untraced").await;
    assert_eq!(task["traceparent"], Value::Null, "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_schedule_refuses_a_malformed_item_whole_naming_its_index() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let good = json!({"id": "a", "delay_ms": 3_600_000, "payload": "x"});
    for (bad, says) in [
        (json!({"id": "b"}), "exactly one"),
        (json!({"delay_ms": 5}), "missing field `id`"),
        (json!({"id": "", "delay_ms": 5}), "empty"),
        (json!({"id": "d", "at": "soon"}), "soon"),
        (
            json!({"id": "e", "delay_ms": 5, "colour": "red"}),
            "unknown field",
        ),
        (json!({"id": "f", "delay_ms": 5, "payload": null}), "null"),
        (
            json!({"id": "g", "due_ms": 1_900_000_000u64}),
            "looks like seconds",
        ),
        (json!({"id": "h", "delay_ms": 5, "mode": "nope"}), "nope"),
    ] {
        let items = json!([good.clone(), bad.clone(), good.clone()]);
        let (status, error) = api.call("POST", "/v1/queues/bulk/tasks", Some(items)).await;
        assert_eq!(status, 400, "{bad}: {error}");
        let message = error["error"].as_str().unwrap_or_default();
        assert!(
            message.contains("index 1") && message.contains(says),
            "{bad}: {message}"
        );
    }
    assert_eq!(
        api.ok("/v1/queues").await.get("bulk"),
        None,
        "nothing stored"
    );

    let items = json!([
        good,
        {"id": "c", "in": "2h", "payload": "y"},
        {"id": "a", "delay_ms": 3_600_000}
    ]);
    let (status, summary) = api.call("POST", "/v1/queues/bulk/tasks", Some(items)).await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["scheduled"], 3, "{summary}");
    assert_eq!(summary["replaced"], 1, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(api.ok("/v1/queues").await["bulk"]["pending"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_its_status_and_a_json_message() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let long_id = "x".repeat(600);
    let cases: Vec<(&str, String, Option<Value>, u16, &str)> = vec![
        (
            "PUT",
            "/v1/queues/bad%20queue!/tasks/a".into(),
            Some(json!({"delay_ms": 1})),
            400,
            "bad queue!",
        ),
        (
            "GET",
            "/v1/queues/bad%20queue!/pending".into(),
            None,
            400,
            "bad queue!",
        ),
        (
            "GET",
            format!("/v1/queues/q/tasks/{long_id}"),
            None,
            400,
            "task id",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({})),
            400,
            "exactly one",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"in": "1s", "at": "2030-01-01T00:00:00Z"})),
            400,
            "exactly one",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"at": "tomorrow"})),
            400,
            "tomorrow",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"in": "5parsecs"})),
            400,
            "5parsecs",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"delay": 5})),
            400,
            "delay",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"due_ms": u64::MAX})),
            400,
            "due",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"delay_ms": 1, "payload": "p".repeat(2000)})),
            413,
            "max_payload",
        ),
        (
            "PUT",
            "/v1/queues/q/tasks/a".into(),
            Some(json!({"delay_ms": 1, "payload": "p".repeat(100_000)})),
            413,
            "too large",
        ),
        (
            "POST",
            "/v1/queues/q/tasks".into(),
            Some(json!({"id": "not a list"})),
            400,
            "invalid body",
        ),
        (
            "GET",
            "/v1/queues/q/pending?limit=0".into(),
            None,
            400,
            "limit",
        ),
        (
            "GET",
            "/v1/queues/q/dead?limit=5000".into(),
            None,
            400,
            "limit",
        ),
        ("GET", "/v1/nothing".into(), None, 404, "no such endpoint"),
        (
            "POST",
            "/v1/queues/q/dead/zzz/retry".into(),
            None,
            404,
            "zzz",
        ),
        ("DELETE", "/v1/queues/q/dead/zzz".into(), None, 404, "zzz"),
        ("PATCH", "/v1/nodes".into(), None, 405, "not allowed"),
    ];
    for (method, path, body, status, needle) in cases {
        let (got, answer) = api.call(method, &path, body).await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        let message = answer["error"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{method} {path}: {answer} should name {needle:?}"
        );
    }
    // Not JSON at all.
    let response = api
        .client
        .put(format!("{}/v1/queues/q/tasks/a", api.base))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_guards_v1_and_read_only_refuses_changes() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let mut guarded = options(&scheduler);
    guarded.token = Some("s3cret-token".to_owned());
    let api = Api::new(serve(&scheduler, guarded).await);

    let (status, answer) = api.get("/v1/queues").await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"]
        .as_str()
        .is_some_and(|e| e.contains("token")));
    assert_eq!(api.with_token("wrong").get("/v1/queues").await.0, 401);
    assert_eq!(
        api.with_token("s3cret-token-longer")
            .get("/v1/nodes")
            .await
            .0,
        401
    );
    let authed = api.with_token("s3cret-token");
    assert_eq!(authed.get("/v1/queues").await.0, 200);
    let (status, _) = authed
        .call(
            "PUT",
            "/v1/queues/q/tasks/a",
            Some(json!({"delay_ms": 60_000})),
        )
        .await;
    assert_eq!(status, 200);
    for open in ["/healthz", "/readyz", "/metrics", "/", "/assets/app.js"] {
        assert_eq!(api.get(open).await.0, 200, "{open} stays open");
    }

    let mut read_only = options(&scheduler);
    read_only.read_only = true;
    let api = Api::new(serve(&scheduler, read_only).await);
    assert_eq!(api.get("/v1/queues/q/tasks/a").await.0, 200);
    for (method, path) in [
        ("PUT", "/v1/queues/q/tasks/b"),
        ("DELETE", "/v1/queues/q/tasks/a"),
        ("POST", "/v1/queues/q/tasks"),
        ("POST", "/v1/queues/q/dead/retry"),
        ("DELETE", "/v1/queues/q/dead"),
    ] {
        let (status, answer) = api.call(method, path, Some(json!({"delay_ms": 1}))).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("read-only")));
    }
    assert_eq!(
        api.get("/v1/queues/q/tasks/a").await.1["state"],
        "pending",
        "nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_running_task_says_inflight() {
    let server = redis();
    let config = config(&server.url());
    let recorder = Recorder::default();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let held = gate.clone();
    let runs = recorder.clone();
    let node = delayq_engine::Scheduler::builder(config.clone())
        .default_handler(move |task: delayq_engine::Task| {
            let held = held.clone();
            let runs = runs.clone();
            async move {
                runs.runs.lock().push(task);
                held.notified().await;
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("a node");
    let api = Api::new(serve(&node, options(&node)).await);
    let (status, _) = api
        .call(
            "PUT",
            "/v1/queues/slow/tasks/s-1",
            Some(json!({"delay_ms": 0})),
        )
        .await;
    assert_eq!(status, 200);
    eventually(
        std::time::Duration::from_secs(10),
        "the handler to start",
        || async { (recorder.runs_of("s-1") == 1).then_some(()) },
    )
    .await;
    let (_, answer) = api.call("DELETE", "/v1/queues/slow/tasks/s-1", None).await;
    assert_eq!(answer, json!({"cancelled": false, "state": "inflight"}));
    // notify_one keeps a permit should the handler not be waiting yet.
    gate.notify_one();
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limits_count_the_decoded_payload_and_bulk_bodies_are_bounded() {
    let server = redis();
    let mut config = config(&server.url());
    config.engine.max_payload = 100 * 1024;
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);

    // 90 KiB of CJK text (3 bytes a character) escaped as \uXXXX: 180 KiB of JSON, more
    // than max_payload + 64 KiB, for a payload within max_payload once decoded.
    let escaped = "\\u4e2d".repeat(30 * 1024);
    let body = format!(r#"{{"delay_ms": 3600000, "payload": "{escaped}"}}"#);
    assert!(body.len() > config.engine.max_payload + 64 * 1024);
    let answer = api
        .client
        .put(format!("{}/v1/queues/cjk/tasks/t", api.base))
        .body(body)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(answer.status().as_u16(), 200, "{:?}", answer.text().await);
    let (_, task) = api.get("/v1/queues/cjk/tasks/t").await;
    assert_eq!(
        task["payload"].as_str().map(|payload| payload.len()),
        Some(90 * 1024)
    );
    // A decoded payload over max_payload is still 413, naming it.
    let too_big = "\\u4e2d".repeat(35 * 1024);
    let answer = api
        .client
        .put(format!("{}/v1/queues/cjk/tasks/big", api.base))
        .body(format!(r#"{{"delay_ms": 5, "payload": "{too_big}"}}"#))
        .send()
        .await
        .expect("the server answers");
    assert_eq!(answer.status().as_u16(), 413);
    assert!(answer
        .text()
        .await
        .unwrap_or_default()
        .contains("max_payload"));

    // 10,001 tasks in one body: refused naming the bound, nothing stored.
    let items: Vec<Value> = (0..10_001)
        .map(|n| json!({"id": format!("b{n}"), "delay_ms": 3_600_000}))
        .collect();
    let (status, error) = api
        .call(
            "POST",
            "/v1/queues/bounded/tasks",
            Some(Value::Array(items)),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"].as_str().is_some_and(|e| e.contains("10000")),
        "{error}"
    );
    assert_eq!(api.ok("/v1/queues").await.get("bounded"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_items_the_store_refuses_fail_alone_and_the_first_100_are_listed() {
    let server = redis();
    let mut config = config(&server.url());
    config.engine.max_payload = 16;
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let too_big = "p".repeat(config.engine.max_payload + 1);
    let mut items: Vec<Value> = (0..150)
        .map(|n| json!({"id": format!("big{n}"), "delay_ms": 5, "payload": too_big}))
        .collect();
    items.push(json!({"id": "small", "delay_ms": 3_600_000}));
    let items = Value::Array(items);
    let (status, summary) = api
        .call("POST", "/v1/queues/bounded/tasks", Some(items))
        .await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["failed"], 150);
    assert_eq!(summary["scheduled"], 1);
    assert_eq!(summary["errors"].as_array().map(Vec::len), Some(100));
    assert_eq!(summary["errors"][99]["index"], 99);
    assert!(
        summary["errors"][0]["error"]
            .as_str()
            .is_some_and(|error| error.contains("max_payload")),
        "{summary}"
    );
    assert_eq!(summary["errors_truncated"], true);
}
