//! The queue-control endpoints against a real redis-server: pause and resume answer the
//! CLI's objects, the queue list shows `paused`, /metrics has `delayq_queue_paused`, an
//! unknown queue is 404, and read-only mode refuses both. `DELETE /v1/queues/{queue}`: 409
//! with the counts while the queue holds tasks, 200 with `?force=true`, 404 once gone, 403
//! when read-only.

mod support;

use serde_json::json;
use support::{config, options, producer, redis, sample, serve, Api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_a_queue_over_http() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let (status, _) = api
        .call(
            "PUT",
            "/v1/queues/orders/tasks/o-1",
            Some(json!({"in": "1h"})),
        )
        .await;
    assert_eq!(status, 200);

    let (status, paused) = api.call("POST", "/v1/queues/orders/pause", None).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused, json!({"queue": "orders", "paused": true}));
    let queues = api.ok("/v1/queues").await;
    assert_eq!(queues["orders"]["paused"], true, "{queues}");
    let metrics = api.metrics().await;
    assert_eq!(
        sample(&metrics, "delayq_queue_paused", &[("queue", "orders")]),
        1.0,
        "{metrics}"
    );

    let (status, resumed) = api.call("POST", "/v1/queues/orders/resume", None).await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed, json!({"queue": "orders", "paused": false}));
    assert_eq!(api.ok("/v1/queues").await["orders"]["paused"], false);

    let (status, unknown) = api.call("POST", "/v1/queues/nowhere/pause", None).await;
    assert_eq!(status, 404, "{unknown}");
    assert!(unknown["error"]
        .as_str()
        .unwrap_or_default()
        .contains("nowhere"));
    let (status, _) = api.call("POST", "/v1/queues/bad%20name/pause", None).await;
    assert_eq!(status, 400);

    let mut read_only = options(&scheduler);
    read_only.read_only = true;
    let reader = Api::new(serve(&scheduler, read_only).await);
    let (status, _) = reader.call("POST", "/v1/queues/orders/pause", None).await;
    assert_eq!(status, 403);
    assert_eq!(reader.ok("/v1/queues").await["orders"]["paused"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_a_queue_over_http() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    for (queue, id) in [("orders", "o-1"), ("orders", "o-2"), ("orders-eu", "e-1")] {
        let (status, _) = api
            .call(
                "PUT",
                &format!("/v1/queues/{queue}/tasks/{id}"),
                Some(json!({"in": "1h"})),
            )
            .await;
        assert_eq!(status, 200);
    }

    let mut read_only = options(&scheduler);
    read_only.read_only = true;
    let reader = Api::new(serve(&scheduler, read_only).await);
    let (status, _) = reader
        .call("DELETE", "/v1/queues/orders?force=true", None)
        .await;
    assert_eq!(status, 403);

    let (status, refused) = api.call("DELETE", "/v1/queues/orders", None).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["queue"], "orders");
    assert_eq!(refused["pending"], 2);
    assert_eq!(refused["inflight"], 0);
    assert_eq!(refused["dead"], 0);
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("2 pending"),
        "{refused}"
    );
    let (status, refused) = api
        .call("DELETE", "/v1/queues/orders?force=false", None)
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(api.ok("/v1/queues").await["orders"]["pending"], 2);

    let (status, deleted) = api
        .call("DELETE", "/v1/queues/orders?force=true", None)
        .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        deleted,
        json!({"queue": "orders", "deleted": true, "tasks": 2})
    );
    let queues = api.ok("/v1/queues").await;
    assert!(queues.get("orders").is_none(), "{queues}");
    assert_eq!(queues["orders-eu"]["pending"], 1, "{queues}");
    let (status, _) = api.call("GET", "/v1/queues/orders/tasks/o-1", None).await;
    assert_eq!(status, 404);

    let (status, gone) = api.call("DELETE", "/v1/queues/orders", None).await;
    assert_eq!(status, 404, "{gone}");
    assert!(gone["error"]
        .as_str()
        .unwrap_or_default()
        .contains("orders"));
    let (status, _) = api.call("DELETE", "/v1/queues/bad%20name", None).await;
    assert_eq!(status, 400);
    let (status, _) = api
        .call("DELETE", "/v1/queues/orders-eu?force=yes", None)
        .await;
    assert_eq!(status, 400);
}
