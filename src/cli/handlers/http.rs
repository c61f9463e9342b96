//! `--handler http --url URL`: POSTs each task as JSON.

use std::time::Duration;

use delayq_engine::{HandlerError, Task};

use super::{excerpt, task_json};

/// How much of a non-2xx response body goes into the task's `last_error`.
const BODY_EXCERPT: usize = 300;

/// POSTs `{"queue","id","due_ms","fired_ms","attempt","generation","node","payload"}` per task
/// (`payload_base64` instead of `payload` when the payload is not UTF-8). A 2xx status acks;
/// any other status or a transport error fails the attempt. The queue's `timeout` bounds the
/// whole request.
#[derive(Debug)]
pub struct HttpHandler {
    url: reqwest::Url,
    client: reqwest::Client,
}

impl HttpHandler {
    /// A handler posting to `url` (http or https). Fails on a bad URL.
    pub fn new(url: &str) -> Result<Self, String> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|error| format!("invalid value {url:?} for --url: {error}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "invalid value {url:?} for --url: the scheme must be http or https"
            ));
        }
        // reqwest is built without a TLS crypto provider of its own: use ring. Installing
        // fails only when a provider is already installed, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("delayq/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(HttpHandler {
            url: parsed,
            client,
        })
    }

    /// Posts `task`.
    pub async fn run(&self, task: &Task) -> Result<(), HandlerError> {
        let response = self
            .client
            .post(self.url.clone())
            .json(&task_json(task))
            .send()
            .await
            .map_err(|error| format!("POST {}: {error}", self.url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.bytes().await.unwrap_or_default();
        let body = excerpt(&body, BODY_EXCERPT);
        Err(if body.is_empty() {
            format!("POST {} answered {status}", self.url)
        } else {
            format!("POST {} answered {status}: {body}", self.url)
        }
        .into())
    }
}
