//! Requests at the edges, against a real redis-server: every rejection is a JSON error
//! naming the part at fault, bodies are read whatever their content type, ids travel
//! percent-encoded, answers carry the cluster time, and the router works mounted under a
//! path of a larger application.

mod support;

use serde_json::{json, Value};
use support::{config, options, producer, redis, serve, Api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_query_path_and_body_are_json_errors_naming_the_part() {
    let server = redis();
    let scheduler = producer(&config(&server.url())).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    for (path, needle) in [
        ("/v1/queues/q/pending?limit=abc", "limit"),
        ("/v1/queues/q/dead?limit=-1", "limit"),
        ("/v1/queues/q/pending?colour=red", "colour"),
        ("/v1/queues/q/tasks/%FF%FE", "invalid path"),
        ("/v1/queues/%FF/dead", "invalid path"),
    ] {
        let response = api
            .client
            .get(format!("{}{path}", api.base))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status().as_u16(), 400, "{path}");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("application/json"),
            "{path}: {content_type}"
        );
        let body: Value = response.json().await.expect("a JSON body");
        let message = body["error"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{path}: {body} should name {needle:?}"
        );
    }
    let (status, empty) = api.call("PUT", "/v1/queues/q/tasks/a", None).await;
    assert_eq!(status, 400, "{empty}");
    assert!(
        empty["error"].as_str().is_some_and(|e| e.contains("empty")),
        "{empty}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_is_json_whatever_its_content_type_says() {
    let server = redis();
    let scheduler = producer(&config(&server.url())).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    // No content type at all, and what `curl -d` sends by default.
    for (id, content_type) in [
        ("plain", None),
        ("form", Some("application/x-www-form-urlencoded")),
        ("text", Some("text/plain")),
    ] {
        let mut request = api
            .client
            .put(format!("{}/v1/queues/q/tasks/{id}", api.base))
            .body(r#"{"delay_ms": 60000, "payload": "x"}"#);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.expect("an answer");
        let status = response.status().as_u16();
        let body: Value = response.json().await.expect("a JSON body");
        assert_eq!(status, 200, "{content_type:?}: {body}");
        assert_eq!(body["id"], id);
    }
    let response = api
        .client
        .post(format!("{}/v1/queues/q/tasks", api.base))
        .body(r#"[{"id": "bulk", "delay_ms": 60000}]"#)
        .send()
        .await
        .expect("an answer");
    let body: Value = response.json().await.expect("a JSON body");
    assert_eq!(body["scheduled"], 1, "{body}");
    assert_eq!(api.ok("/v1/queues").await["q"]["pending"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_with_slashes_spaces_and_unicode_round_trip_percent_encoded() {
    let server = redis();
    let scheduler = producer(&config(&server.url())).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let id = "order/42 ü?#%";
    let encoded = "order%2F42%20%C3%BC%3F%23%25";
    let path = format!("/v1/queues/q/tasks/{encoded}");
    let (status, scheduled) = api
        .call("PUT", &path, Some(json!({"delay_ms": 60_000})))
        .await;
    assert_eq!(status, 200, "{scheduled}");
    assert_eq!(scheduled["id"], id);
    assert_eq!(api.ok(&path).await["id"], id);
    let pending = api.ok("/v1/queues/q/pending").await;
    assert_eq!(pending[0]["id"], id, "{pending}");
    let (_, cancelled) = api.call("DELETE", &path, None).await;
    assert_eq!(cancelled, json!({"cancelled": true}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_carry_the_cluster_time_and_the_bearer_scheme_ignores_case() {
    let server = redis();
    let scheduler = producer(&config(&server.url())).await;
    let mut guarded = options(&scheduler);
    guarded.token = Some("t0k3n".to_owned());
    let api = Api::new(serve(&scheduler, guarded).await);
    let before = scheduler.now_ms();
    let response = api
        .client
        .get(format!("{}/v1/queues", api.base))
        .header("authorization", "bearer t0k3n")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 200);
    let stamped: u64 = response
        .headers()
        .get(delayq_http::CLUSTER_NOW_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("an x-delayq-now-ms header");
    let after = scheduler.now_ms();
    assert!(
        (before..=after).contains(&stamped),
        "{before} <= {stamped} <= {after}"
    );
    for header in ["Basic dDBrM246", "Bearer", "Bearer t0k3", "t0k3n"] {
        let status = api
            .client
            .get(format!("{}/v1/queues", api.base))
            .header("authorization", header)
            .send()
            .await
            .expect("an answer")
            .status()
            .as_u16();
        assert_eq!(status, 401, "{header}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_works_mounted_under_a_path() {
    let server = redis();
    let scheduler = producer(&config(&server.url())).await;
    let mut read_only = options(&scheduler);
    read_only.read_only = true;
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "the host's own page" }))
        .nest("/delayq", delayq_http::router(scheduler.clone(), read_only));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let api = Api::new(format!("http://{addr}"));
    assert_eq!(api.get("/").await.1, json!("the host's own page"));
    // axum routes `/delayq` (not `/delayq/`) to a router nested at `/delayq`.
    {
        let page = "/delayq";
        let (status, html) = api.get(page).await;
        assert_eq!(status, 200, "{page}");
        let html = html.as_str().unwrap_or_default();
        assert!(
            html.contains(r#"<base href="./delayq/">"#),
            "{page}: {html}"
        );
        assert!(
            html.contains(r#"<meta name="delayq-read-only" content="true">"#),
            "the page knows it is read-only"
        );
        assert!(
            html.contains(r#"<meta name="delayq-fires" content="false">"#),
            "a producer fires nothing"
        );
    }
    for path in [
        "/delayq/assets/app.js",
        "/delayq/assets/style.css",
        "/delayq/v1/queues",
        "/delayq/healthz",
    ] {
        assert_eq!(api.get(path).await.0, 200, "{path}");
    }
    assert_eq!(api.get("/delayq/assets/nope.js").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_change_from_another_site_is_refused_without_a_token() {
    let server = redis();
    let scheduler = producer(&config(&server.url())).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let send = |method: reqwest::Method, path: &str, site: Option<&str>| {
        let mut request = api
            .client
            .request(method, format!("{}{path}", api.base))
            .header("content-type", "text/plain")
            .body(r#"[{"id": "csrf", "delay_ms": 0}]"#);
        if let Some(site) = site {
            request = request.header("sec-fetch-site", site);
        }
        async move {
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.expect("JSON"))
        }
    };
    // What a form or a no-cors fetch on another site would send: no preflight needed.
    for site in ["cross-site", "same-site"] {
        let (status, body) = send(reqwest::Method::POST, "/v1/queues/q/tasks", Some(site)).await;
        assert_eq!(status, 403, "{site}: {body}");
        assert!(body["error"]
            .as_str()
            .is_some_and(|e| e.contains("cross-site")));
        let (status, _) = send(reqwest::Method::POST, "/v1/queues/q/dead/retry", Some(site)).await;
        assert_eq!(status, 403, "{site}");
    }
    assert_eq!(
        api.ok("/v1/queues").await,
        json!({}),
        "nothing was scheduled"
    );
    // Reading is fine (the other site cannot read the answer anyway); the dashboard itself
    // is same-origin; clients that are not browsers send no such header.
    assert_eq!(
        send(reqwest::Method::GET, "/v1/queues", Some("cross-site"))
            .await
            .0,
        200
    );
    for site in [Some("same-origin"), Some("none"), None] {
        let (status, body) = send(reqwest::Method::POST, "/v1/queues/q/tasks", site).await;
        assert_eq!(status, 200, "{site:?}: {body}");
    }
}
