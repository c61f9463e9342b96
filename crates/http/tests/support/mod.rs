//! Shared helpers of the API tests: a private redis-server, fast configs, real schedulers
//! (nodes with handlers, producers without), the router served on a free port, and polling
//! with deadlines.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_engine::config::{BackoffConfig, Config, QueueConfig};
use delayq_engine::{Scheduler, Task};
use delayq_http::HttpOptions;
use delayq_testkit::RedisServer;
use parking_lot::Mutex;
use serde_json::Value;

static PREFIX: AtomicU64 = AtomicU64::new(0);

/// A config on `url` under a fresh key prefix, with short periods and one attempt.
pub fn config(url: &str) -> Config {
    let mut config = Config::default();
    config.redis.url = url.to_owned();
    config.redis.key_prefix = format!(
        "http{}-{}",
        std::process::id(),
        PREFIX.fetch_add(1, Ordering::Relaxed)
    );
    config.node.name = "api-test".to_owned();
    config.node.heartbeat_period = Duration::from_millis(100);
    config.node.heartbeat_ttl = Duration::from_millis(600);
    config.node.start_timeout = Duration::from_secs(5);
    config.engine.pull_period = Duration::from_millis(200);
    config.engine.prefetch_window = Duration::from_secs(2);
    config.engine.max_payload = 1024;
    config.queue_defaults = QueueConfig {
        partitions: 8,
        concurrency: 16,
        max_attempts: 1,
        backoff: BackoffConfig {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(100),
        },
        timeout: Duration::from_secs(5),
        rate_limit: None,
        global_concurrency: None,
        ..QueueConfig::default()
    };
    config
}

/// What the test handler does with a task: tasks whose id starts with `fail` fail while
/// `failing` is set; every run is recorded.
#[derive(Clone, Default)]
pub struct Recorder {
    pub runs: Arc<Mutex<Vec<Task>>>,
    pub failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Recorder {
    pub fn failing() -> Self {
        let recorder = Recorder::default();
        recorder.failing.store(true, Ordering::SeqCst);
        recorder
    }

    pub fn runs_of(&self, id: &str) -> usize {
        self.runs.lock().iter().filter(|task| task.id == id).count()
    }
}

/// A node serving every queue with `recorder`.
pub async fn node(config: &Config, recorder: &Recorder) -> Scheduler {
    let recorder = recorder.clone();
    Scheduler::builder(config.clone())
        .default_handler(move |task: Task| {
            let recorder = recorder.clone();
            async move {
                let fail = task.id.starts_with("fail") && recorder.failing.load(Ordering::SeqCst);
                recorder.runs.lock().push(task);
                if fail {
                    Err(std::io::Error::other("boom: the payment service said 502"))
                } else {
                    Ok(())
                }
            }
        })
        .start()
        .await
        .expect("start a node")
}

/// A producer (no handlers, never a member).
pub async fn producer(config: &Config) -> Scheduler {
    Scheduler::builder(config.clone())
        .start()
        .await
        .expect("start a producer")
}

/// The router of `scheduler` on a free local port; returns its base URL (`http://ip:port`).
pub async fn serve(scheduler: &Scheduler, mut options: HttpOptions) -> String {
    if options.metrics.is_none() {
        options.metrics = Some(delayq_http::install_prometheus().expect("the recorder"));
    }
    let app = delayq_http::router(scheduler.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// Options of `scheduler`'s config with queue gauges never cached (tests read fresh counts).
pub fn options(scheduler: &Scheduler) -> HttpOptions {
    let mut options = HttpOptions::from_config(scheduler.config());
    options.queue_stats_ttl = Duration::ZERO;
    options
}

/// A client that talks to one base URL.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    pub token: Option<String>,
}

impl Api {
    pub fn new(base: String) -> Self {
        // reqwest is built without a default TLS provider; plain HTTP still needs one set.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Api {
            base,
            client: reqwest::Client::new(),
            token: None,
        }
    }

    pub fn with_token(&self, token: &str) -> Self {
        Api {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// Sends `method path` with an optional JSON body; returns the status and the body
    /// (JSON when it parses, else a string).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None).await
    }

    /// GET that must answer 200.
    pub async fn ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = self
            .client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 200);
        response.text().await.expect("a body")
    }
}

/// The value of the sample `name{labels}` in Prometheus text (labels in any order); 0 when
/// absent.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = match series.split_once('{') {
                Some((series_name, rest)) => (series_name, rest),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let all = labels
                .iter()
                .all(|(key, value)| rest.contains(&format!("{key}=\"{value}\"")));
            if all {
                value.parse::<f64>().ok()
            } else {
                None
            }
        })
        .next()
        .unwrap_or(0.0)
}

/// Polls `check` every 50 ms until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A private redis-server.
pub fn redis() -> RedisServer {
    RedisServer::start()
}
