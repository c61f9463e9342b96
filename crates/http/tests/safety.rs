//! The server is safe where a browser can reach it: a `Host` that is not the listen address,
//! loopback or `http.allowed_hosts` is 421 (DNS rebinding), every answer forbids framing, a
//! token from the file or the environment is trimmed, and a non-ASCII Authorization header
//! is a wrong token.

mod support;

use delayq_http::HttpOptions;
use support::{config, options, producer, redis, serve};

async fn get_with_host(base: &str, path: &str, host: &str) -> reqwest::Response {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header(reqwest::header::HOST, host)
        .send()
        .await
        .expect("the server answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_misdirected_and_no_page_can_be_framed() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let mut guarded = options(&scheduler);
    guarded.listen = Some("127.0.0.1:7070".parse().expect("an address"));
    guarded.allowed_hosts = vec!["delayq.internal".to_owned()];
    let base = serve(&scheduler, guarded).await;

    for host in ["evil.example", "evil.example:7070", "10.9.8.7:7070"] {
        let response = get_with_host(&base, "/v1/queues", host).await;
        assert_eq!(response.status().as_u16(), 421, "{host}");
        let body: serde_json::Value = response.json().await.expect("JSON");
        assert!(
            body["error"].as_str().unwrap_or_default().contains(host),
            "{host}: {body}"
        );
    }
    for host in [
        "127.0.0.1:7070",
        "localhost:7070",
        "delayq.internal",
        "[::1]:7070",
    ] {
        let response = get_with_host(&base, "/v1/queues", host).await;
        assert_eq!(response.status().as_u16(), 200, "{host}");
    }
    let page = get_with_host(&base, "/", "localhost").await;
    assert_eq!(page.status().as_u16(), 200);
    let headers = page.headers();
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["content-security-policy"], "frame-ancestors 'none'");
    // A rebinding page cannot even read the dashboard.
    assert_eq!(
        get_with_host(&base, "/", "evil.example")
            .await
            .status()
            .as_u16(),
        421
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_config_is_trimmed_and_a_non_ascii_header_is_a_wrong_token() {
    let server = redis();
    let mut config = config(&server.url());
    config.http.token = Some("t0ken\n".to_owned());
    let scheduler = producer(&config).await;
    let options = HttpOptions::from_config(&config);
    assert_eq!(options.token.as_deref(), Some("t0ken"));
    let base = serve(&scheduler, options).await;
    // Installed here too: the other test may not have run first (reqwest panics without it).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let ok = client
        .get(format!("{base}/v1/queues"))
        .bearer_auth("t0ken")
        .send()
        .await
        .expect("answer");
    assert_eq!(ok.status().as_u16(), 200);
    let odd = client
        .get(format!("{base}/v1/queues"))
        .header(
            reqwest::header::AUTHORIZATION,
            reqwest::header::HeaderValue::from_bytes(b"Bearer t\xf6ken").expect("a header"),
        )
        .send()
        .await
        .expect("answer");
    assert_eq!(odd.status().as_u16(), 401);
    let body: serde_json::Value = odd.json().await.expect("JSON");
    assert_eq!(body["error"], "wrong token", "{body}");
}
