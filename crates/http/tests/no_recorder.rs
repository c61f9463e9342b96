//! The library never installs a global metrics recorder of its own: a node that fires tasks
//! and a router without a Prometheus handle leave the process's recorder free for the
//! application (its own binary, so no other test installs one first).

mod support;

use std::time::Duration;

use serde_json::json;
use support::{config, eventually, node, redis, Api, Recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_installs_a_recorder_unless_the_application_asks() {
    let server = redis();
    let config = config(&server.url());
    let recorder = Recorder::default();
    let node = node(&config, &recorder).await;
    let app = delayq_http::router(
        node.clone(),
        delayq_http::HttpOptions::from_config(node.config()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let api = Api::new(format!("http://{addr}"));
    let (status, _) = api
        .call("PUT", "/v1/queues/q/tasks/a", Some(json!({"delay_ms": 0})))
        .await;
    assert_eq!(status, 200);
    eventually(Duration::from_secs(15), "the task to fire", || async {
        (recorder.runs_of("a") == 1).then_some(())
    })
    .await;

    let (status, body) = api.get("/metrics").await;
    assert_eq!(status, 404, "no handle, no /metrics: {body}");
    assert!(body["error"]
        .as_str()
        .is_some_and(|e| e.contains("metrics")));
    assert!(
        metrics::set_global_recorder(metrics::NoopRecorder).is_ok(),
        "something installed a global recorder"
    );
    node.shutdown().await.expect("shutdown");
}
