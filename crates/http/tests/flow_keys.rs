//! Flow keys over HTTP, against a real redis-server and a real node: on a queue with
//! `flow_keys: true` and `per_key_concurrency: 1` whose handler blocks until the test lets it
//! go, the other tasks of a running key are held back, and `GET /v1/queues/{queue}/keys`
//! (the key with running 1 and waiting N, the most waiting first, `limit` honoured and
//! bounded), `GET /v1/queues` (`held_back`) and /metrics (`delayq_queue_tasks` with
//! `state="held_back"`, one series per queue and none per key) show it; once the handler is
//! released, everything fires and the listing is empty again.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_engine::config::QueueConfig;
use delayq_engine::{Scheduler, Task};
use serde_json::{json, Value};
use support::{config, eventually, options, redis, sample, serve, Api};
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(15);
const QUEUE: &str = "hooks";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_keys_show_in_the_keys_route_the_counts_and_the_metrics() {
    let server = redis();
    let mut config = config(&server.url());
    let keyed = QueueConfig {
        flow_keys: true,
        per_key_concurrency: Some(1),
        // The handler blocks while the test looks: no timeout meanwhile.
        timeout: Duration::from_secs(120),
        ..config.queue_defaults
    };
    config.queues.insert(QUEUE.to_owned(), keyed);
    let release = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (gate, runs) = (release.clone(), started.clone());
    let node = Scheduler::builder(config.clone())
        .handler(QUEUE, move |_task: Task| {
            let (gate, runs) = (gate.clone(), runs.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.map(|permit| permit.forget()).ok();
                Ok::<(), std::io::Error>(())
            }
        })
        .default_handler(|_task: Task| async { Ok::<(), std::io::Error>(()) })
        .start()
        .await
        .expect("start a node");
    let api = Api::new(serve(&node, options(&node)).await);

    // Five tasks of customer-7, two of other, one without a key: all due now.
    let mut items: Vec<Value> = (0..5)
        .map(|n| json!({"id": format!("hook:{{customer-7}}:{n}"), "delay_ms": 0}))
        .collect();
    items.extend((0..2).map(|n| json!({"id": format!("hook:{{other}}:{n}"), "delay_ms": 0})));
    items.push(json!({"id": "plain-1", "delay_ms": 0}));
    let (status, answer) = api
        .call("POST", "/v1/queues/hooks/tasks", Some(json!(items)))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["scheduled"], 8, "{answer}");

    let keys = eventually(WAIT, "customer-7 and other to hold tasks back", || async {
        let keys = api.ok("/v1/queues/hooks/keys").await;
        let waiting: Vec<u64> = keys
            .as_array()
            .map(|keys| {
                keys.iter()
                    .filter_map(|key| key["waiting"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        (waiting == [4, 1]).then_some(keys)
    })
    .await;
    let now_ms = node.now_ms();
    for (index, key, waiting) in [(0, "customer-7", 4), (1, "other", 1)] {
        let listed = &keys[index];
        assert_eq!(listed["queue"], QUEUE, "{keys}");
        assert_eq!(listed["key"], key, "the most waiting first: {keys}");
        assert_eq!(listed["running"], 1, "{keys}");
        assert_eq!(listed["waiting"], waiting, "{keys}");
        let oldest = listed["oldest_due_ms"].as_u64().expect("oldest_due_ms");
        assert!(oldest > 0 && oldest <= now_ms, "{keys}");
        assert!(listed["longest_wait_ms"].as_u64().is_some(), "{keys}");
    }
    assert_eq!(
        started.load(Ordering::SeqCst),
        3,
        "one per key and the plain task"
    );

    // The limit: honoured, bounded like the other listings.
    let first = api.ok("/v1/queues/hooks/keys?limit=1").await;
    assert_eq!(first.as_array().map(Vec::len), Some(1), "{first}");
    assert_eq!(first[0]["key"], "customer-7");
    for bad in ["limit=0", "limit=1001", "limit=x", "size=3"] {
        let (status, body) = api.get(&format!("/v1/queues/hooks/keys?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    let (status, body) = api.get("/v1/queues/bad%20name/keys").await;
    assert_eq!(status, 400, "{body}");
    // An unknown queue, and a queue without flow keys: nothing held back, as the other
    // listings answer.
    assert_eq!(api.ok("/v1/queues/nowhere/keys").await, json!([]));
    let (status, _) = api
        .call(
            "PUT",
            "/v1/queues/plain/tasks/a",
            Some(json!({"delay_ms": 60_000})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(api.ok("/v1/queues/plain/keys").await, json!([]));

    // The counts and the gauge: five held back, counted in pending and due now too.
    let counts = api.ok("/v1/queues").await;
    let hooks = &counts[QUEUE];
    assert_eq!(hooks["held_back"], 5, "{counts}");
    assert_eq!(hooks["pending"], 5, "{counts}");
    assert_eq!(hooks["due_now"], 5, "{counts}");
    assert_eq!(hooks["inflight"], 3, "{counts}");
    assert_eq!(counts["plain"]["held_back"], 0, "{counts}");
    let metrics = api.metrics().await;
    let held = [("queue", QUEUE), ("state", "held_back")];
    assert_eq!(
        sample(&metrics, "delayq_queue_tasks", &held),
        5.0,
        "{metrics}"
    );
    assert!(
        !metrics.contains("customer-7"),
        "no series names a key: {metrics}"
    );

    // Let every handler go: the held-back tasks fire one by one per key, then nothing is held.
    release.add_permits(100);
    eventually(WAIT, "every task of hooks to be done", || async {
        let counts = api.ok("/v1/queues").await;
        (counts[QUEUE]["done"] == 8 && counts[QUEUE]["held_back"] == 0).then_some(())
    })
    .await;
    assert_eq!(started.load(Ordering::SeqCst), 8);
    assert_eq!(api.ok("/v1/queues/hooks/keys").await, json!([]));
    let metrics = api.metrics().await;
    assert_eq!(
        sample(&metrics, "delayq_queue_tasks", &held),
        0.0,
        "{metrics}"
    );
    node.shutdown().await.expect("shutdown");
}
