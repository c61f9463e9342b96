//! What operators do over HTTP, against a real redis-server and real nodes: pending tasks,
//! dead letters (list, retry, purge), nodes, readiness, and /metrics agreeing with what
//! fired.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use delayq_testkit::RedisServer;
use serde_json::json;
use support::{config, eventually, node, options, producer, redis, sample, serve, Api, Recorder};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_retried_and_purged() {
    let server = redis();
    let config = config(&server.url());
    let recorder = Recorder::failing();
    let node = node(&config, &recorder).await;
    let api = Api::new(serve(&node, options(&node)).await);
    for id in ["fail-1", "fail-2", "fail-3", "fail-4"] {
        let path = format!("/v1/queues/payments/tasks/{id}");
        let (status, _) = api
            .call("PUT", &path, Some(json!({"delay_ms": 0, "payload": "p"})))
            .await;
        assert_eq!(status, 200);
    }
    let dead = eventually(WAIT, "four dead letters", || async {
        let dead = api.ok("/v1/queues/payments/dead?limit=10").await;
        (dead.as_array().map_or(0, Vec::len) == 4).then_some(dead)
    })
    .await;
    let first = &dead[0];
    assert_eq!(first["queue"], "payments");
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["payload"], "p");
    assert!(
        first["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("payment service said 502")),
        "{first}"
    );
    assert!(first["failed_ms"].as_u64().is_some());
    assert_eq!(
        api.ok("/v1/queues/payments/dead?limit=2")
            .await
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Retry one: it fires again (now succeeding) and is done.
    recorder.failing.store(false, Ordering::SeqCst);
    let (status, answer) = api
        .call("POST", "/v1/queues/payments/dead/fail-1/retry", None)
        .await;
    assert_eq!((status, answer), (200, json!({"retried": 1})));
    eventually(WAIT, "fail-1 to be done", || async {
        let task = api.ok("/v1/queues/payments/tasks/fail-1").await;
        (task["state"] == "done").then_some(())
    })
    .await;
    assert_eq!(recorder.runs_of("fail-1"), 2);

    // Purge one, then all the rest; retry all of an empty queue retries none.
    let (status, answer) = api
        .call("DELETE", "/v1/queues/payments/dead/fail-2", None)
        .await;
    assert_eq!((status, answer), (200, json!({"purged": 1})));
    assert_eq!(api.get("/v1/queues/payments/tasks/fail-2").await.0, 404);
    let (_, answer) = api
        .call("POST", "/v1/queues/payments/dead/retry", None)
        .await;
    assert_eq!(answer, json!({"retried": 2}));
    eventually(WAIT, "the retried tasks to be done", || async {
        let stats = api.ok("/v1/queues").await;
        (stats["payments"]["done"] == 3 && stats["payments"]["dead"] == 0).then_some(())
    })
    .await;
    let (_, answer) = api.call("DELETE", "/v1/queues/payments/dead", None).await;
    assert_eq!(answer, json!({"purged": 0}));
    let (_, answer) = api
        .call("POST", "/v1/queues/never-used/dead/retry", None)
        .await;
    assert_eq!(answer, json!({"retried": 0}));
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_lists_the_next_tasks_by_due_time_over_all_partitions() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let items: Vec<_> = (0..30)
        .map(|index| json!({"id": format!("t{index:02}"), "delay_ms": 3_600_000 + (30 - index) * 1000}))
        .collect();
    let (status, _) = api
        .call("POST", "/v1/queues/soon/tasks", Some(json!(items)))
        .await;
    assert_eq!(status, 200);
    let pending = api.ok("/v1/queues/soon/pending?limit=5").await;
    let ids: Vec<&str> = pending
        .as_array()
        .expect("a list")
        .iter()
        .map(|task| task["id"].as_str().expect("an id"))
        .collect();
    assert_eq!(ids, ["t29", "t28", "t27", "t26", "t25"]);
    assert_eq!(pending[0]["attempt"], 1);
    assert!(pending[0]["due_ms"].as_u64() < pending[1]["due_ms"].as_u64());
    assert_eq!(
        api.ok("/v1/queues/soon/pending")
            .await
            .as_array()
            .map(Vec::len),
        Some(20)
    );
    assert_eq!(api.ok("/v1/queues/unknown/pending").await, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_show_payload_previews_and_get_shows_the_whole_payload() {
    let server = redis();
    let mut config = config(&server.url());
    config.engine.max_payload = 64 * 1024;
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let big = "x".repeat(50_000);
    let (status, _) = api
        .call(
            "PUT",
            "/v1/queues/big/tasks/later",
            Some(json!({"delay_ms": 3_600_000, "payload": big})),
        )
        .await;
    assert_eq!(status, 200);
    // A dead letter with the same payload, made through the store.
    let store = scheduler.store();
    let queue = delayq_storage::QueueName::new("big").expect("a queue name");
    let (_, partitions) = store
        .queues()
        .await
        .expect("queues")
        .into_iter()
        .find(|(name, _)| *name == queue)
        .expect("big is registered");
    let id = delayq_storage::TaskId::new("gone").expect("an id");
    let partition =
        delayq_storage::Partition::new(queue, delayq_storage::partition_of(&id, partitions));
    let now_ms = scheduler.now_ms();
    let task = delayq_storage::NewTask {
        id,
        due_ms: now_ms - 1_000,
        payload: big.clone().into(),
        traceparent: None,
    };
    store
        .schedule(&partition, task, delayq_storage::ScheduleMode::Upsert)
        .await
        .expect("schedule");
    let claimed = store
        .claim_due(&partition, now_ms, 1, now_ms + 60_000, "test")
        .await
        .expect("claim");
    store
        .fail(
            &claimed.tasks[0].token,
            "boom",
            delayq_storage::FailAction::DeadLetter,
        )
        .await
        .expect("fail");

    for (list, id) in [("pending", "later"), ("dead", "gone")] {
        let listed = api.ok(&format!("/v1/queues/big/{list}?limit=5")).await;
        let entry = &listed[0];
        assert_eq!(entry["id"], id, "{listed}");
        assert_eq!(entry["payload"], "x".repeat(256), "{list}");
        assert_eq!(entry["payload_bytes"], 50_000, "{list}");
        assert_eq!(entry["payload_truncated"], true, "{list}");
        let whole = api.ok(&format!("/v1/queues/big/tasks/{id}")).await;
        assert_eq!(whole["payload"], big.as_str(), "{list}");
        assert!(whole.get("payload_truncated").is_none(), "{list}");
        for limit in ["0", "1001"] {
            let (status, answer) = api
                .get(&format!("/v1/queues/big/{list}?limit={limit}"))
                .await;
            assert_eq!(status, 400, "{answer}");
            assert_eq!(
                answer["error"],
                format!("invalid limit {limit}: expected 1..=1000")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_readiness_and_metrics_agree_with_what_fired() {
    let server = redis();
    let config = config(&server.url());
    let recorder = Recorder::default();
    let first = node(&config, &recorder).await;
    let second = node(&config, &recorder).await;
    let api = Api::new(serve(&first, options(&first)).await);
    let items: Vec<_> = (0..25)
        .map(|i| json!({"id": format!("m{i}"), "delay_ms": 0}))
        .collect();
    let (status, _) = api
        .call("POST", "/v1/queues/metered/tasks", Some(json!(items)))
        .await;
    assert_eq!(status, 200);
    eventually(WAIT, "25 tasks done", || async {
        (api.ok("/v1/queues").await["metered"]["done"] == 25).then_some(())
    })
    .await;

    let nodes = eventually(WAIT, "two nodes owning all partitions", || async {
        let nodes = api.ok("/v1/nodes").await;
        let owned: u64 = nodes
            .as_array()?
            .iter()
            .filter_map(|n| n["partitions"].as_u64())
            .sum();
        (nodes.as_array()?.len() == 2 && owned == 8).then_some(nodes)
    })
    .await;
    let ids: Vec<&str> = nodes
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    assert!(ids.contains(&first.node_id().as_str()) && ids.contains(&second.node_id().as_str()));
    assert!(
        nodes[0]["heartbeat_age_ms"]
            .as_u64()
            .is_some_and(|age| age < 2_000),
        "{nodes}"
    );
    assert_eq!(nodes[0]["name"], "api-test");
    // Per queue, over the nodes (a node that owns none of the queue's partitions has no entry
    // for it: the first node listed may be that one while the partitions move).
    let metered: u64 = nodes
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|n| n["partitions_by_queue"]["metered"].as_u64())
        .sum();
    assert_eq!(metered, 8, "{nodes}");

    let (status, ready) = api.get("/readyz").await;
    assert_eq!(
        (status, ready["member"].clone(), ready["joined"].clone()),
        (200, json!(true), json!(true))
    );
    assert_eq!(api.get("/healthz").await, (200, json!({"status": "ok"})));

    // Both nodes record into this process's one recorder: the counters are the cluster's.
    let fired_here = recorder.runs.lock().len() as f64;
    let text = eventually(WAIT, "the node gauges", || async {
        let text = api.metrics().await;
        (sample(&text, "delayq_partitions_owned", &[("queue", "metered")]) > 0.0).then_some(text)
    })
    .await;
    let metered = [("queue", "metered")];
    assert_eq!(
        sample(&text, "delayq_tasks_scheduled_total", &metered),
        25.0
    );
    assert_eq!(
        sample(&text, "delayq_tasks_fired_total", &metered),
        fired_here
    );
    assert_eq!(fired_here, 25.0);
    assert_eq!(
        sample(
            &text,
            "delayq_tasks_completed_total",
            &[("queue", "metered"), ("outcome", "ok")]
        ),
        25.0
    );
    assert_eq!(
        sample(&text, "delayq_fire_lateness_seconds_count", &metered),
        25.0
    );
    assert_eq!(
        sample(&text, "delayq_handler_duration_seconds_count", &metered),
        25.0
    );
    assert_eq!(
        sample(
            &text,
            "delayq_fire_lateness_seconds_bucket",
            &[("queue", "metered"), ("le", "+Inf")]
        ),
        25.0
    );
    assert!(
        text.contains("delayq_fire_lateness_seconds_bucket{queue=\"metered\",le=\"0.001\"}"),
        "1 ms buckets"
    );
    assert_eq!(
        sample(
            &text,
            "delayq_queue_tasks",
            &[("queue", "metered"), ("state", "done")]
        ),
        25.0
    );
    assert_eq!(
        sample(
            &text,
            "delayq_queue_tasks",
            &[("queue", "metered"), ("state", "pending")]
        ),
        0.0
    );
    assert_eq!(sample(&text, "delayq_cluster_members", &[]), 2.0);
    assert!(
        text.lines()
            .any(|line| line.starts_with("delayq_prefetched_tasks ")),
        "{text}"
    );
    let lateness = api.ok("/v1/lateness").await;
    assert_eq!(lateness["metered"]["count"], 25, "{lateness}");

    first.shutdown().await.expect("shutdown");
    second.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_gauges_come_from_a_cached_read_not_a_scan_per_scrape() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let mut cached = options(&scheduler);
    cached.queue_stats_ttl = Duration::from_secs(3600);
    let api = Api::new(serve(&scheduler, cached).await);
    let schedule = |ids: std::ops::Range<u32>| {
        let items: Vec<_> = ids
            .map(|i| json!({"id": format!("c{i}"), "delay_ms": 3_600_000}))
            .collect();
        api.call("POST", "/v1/queues/gauge-cache/tasks", Some(json!(items)))
    };
    assert_eq!(schedule(0..3).await.0, 200);
    let pending = [("queue", "gauge-cache"), ("state", "pending")];
    let first = api.metrics().await;
    assert_eq!(sample(&first, "delayq_queue_tasks", &pending), 3.0);
    assert_eq!(schedule(3..5).await.0, 200);
    assert_eq!(api.ok("/v1/queues").await["gauge-cache"]["pending"], 5);
    for _ in 0..3 {
        let text = api.metrics().await;
        assert_eq!(
            sample(&text, "delayq_queue_tasks", &pending),
            3.0,
            "a scrape within the TTL reuses the last read"
        );
    }
    assert_eq!(
        sample(
            &api.metrics().await,
            "delayq_tasks_scheduled_total",
            &[("queue", "gauge-cache")]
        ),
        5.0,
        "counters are live"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_and_never_shows_the_password() {
    let password = "pa55-w0rd-never-shown";
    let mut server = RedisServer::start();
    server
        .command(&["CONFIG", "SET", "requirepass", password])
        .expect("set a password");
    let url = format!("redis://:{password}@127.0.0.1:{}/0", server.port());
    let mut config = config(&url);
    config.redis.response_timeout = Duration::from_millis(500);
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    assert_eq!(api.get("/readyz").await.0, 200);
    let (status, _) = api
        .call(
            "PUT",
            "/v1/queues/q/tasks/a",
            Some(json!({"delay_ms": 1000})),
        )
        .await;
    assert_eq!(status, 200);

    server.stop();
    let mut bodies = String::new();
    for path in [
        "/v1/queues",
        "/v1/queues/q/tasks/a",
        "/v1/queues/q/dead",
        "/readyz",
    ] {
        let (status, body) = api.get(path).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert!(body["error"].is_string(), "{path}: {body}");
        bodies.push_str(&body.to_string());
    }
    let (status, body) = api
        .call("PUT", "/v1/queues/q/tasks/b", Some(json!({"delay_ms": 1})))
        .await;
    assert_eq!(status, 503, "{body}");
    bodies.push_str(&body.to_string());
    let metrics = api.metrics().await;
    assert!(
        sample(&metrics, "delayq_redis_errors_total", &[]) >= 1.0,
        "failed calls are counted: {metrics}"
    );
    bodies.push_str(&metrics);
    bodies.push_str(&api.get("/").await.1.to_string());
    assert!(!bodies.contains(password), "the password leaked: {bodies}");
    assert_eq!(api.get("/healthz").await.0, 200, "the process is still up");
}
