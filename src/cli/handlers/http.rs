//! `--handler http --url URL`: POSTs each task as JSON.
//!
//! Only a 2xx answer to our POST acks a task. Redirects are not followed: reqwest's default
//! policy turns a POST answered with 301/302/303 into a GET, so an `http://` URL redirected
//! to `https://` would ack tasks whose POST never reached the receiver. A 3xx fails the
//! attempt instead and names the `Location` to configure. Secrets in the URL (its
//! `user:password@` and its query string, where tokens usually sit) never reach an error,
//! a task's `last_error` or a log line.
//!
//! Every request carries the Standard Webhooks headers `webhook-id` and `webhook-timestamp`,
//! and `webhook-signature` when secrets are configured (see [`super::webhook`]). A 429 or 503
//! with a `Retry-After` fails the attempt with a [`RetryAfter`]: the task is retried when the
//! receiver asked, not on the backoff.

use std::fmt;
use std::time::{Duration, SystemTime};

use delayq_engine::{HandlerError, RetryAfter, Task};
use reqwest::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;

use super::webhook::{webhook_id, webhook_timestamp, WebhookSigner};
use super::{excerpt_start, failure, task_json};

/// How long connecting to the receiver may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one whole request may take (the queue's `timeout` ends it earlier when shorter).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a non-2xx response body is read; the rest is never downloaded.
const BODY_READ_LIMIT: usize = 4096;
/// How much of that body goes into the task's `last_error`.
const BODY_EXCERPT: usize = 300;
/// How much of a `Retry-After` value goes into the task's `last_error`.
const RETRY_AFTER_EXCERPT: usize = 64;

/// POSTs `{"queue","id","due_ms","fired_ms","attempt","generation","node","payload"}` per task
/// (`payload_base64` instead of `payload` when the payload is not UTF-8). A 2xx status acks;
/// any other status (a redirect included), or a transport error, fails the attempt, except
/// a connection that could not be made for lack of the node's resources (`EMFILE`, ...):
/// that task is put back with its attempt unspent. A 429 or 503 with a `Retry-After` is
/// retried when it says (see [`RetryAfter`] for the cap).
pub struct HttpHandler {
    url: reqwest::Url,
    /// `url` with its credentials and query hidden, for messages.
    shown: String,
    client: reqwest::Client,
    /// Signs each request; `None`: unsigned.
    signer: Option<WebhookSigner>,
}

impl fmt::Debug for HttpHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpHandler")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

impl HttpHandler {
    /// A handler posting to `url` (http or https), signing with `signer` when there is
    /// one. Fails on a bad URL.
    pub fn new(url: &str, signer: Option<WebhookSigner>) -> Result<Self, String> {
        let shown = redact_url(url);
        let parsed = reqwest::Url::parse(url)
            .map_err(|error| format!("invalid value {shown:?} for --url: {error}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "invalid value {shown:?} for --url: the scheme must be http or https"
            ));
        }
        // reqwest is built without a TLS crypto provider of its own: use ring. Installing
        // fails only when a provider is already installed, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("delayq/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {}", describe(&error)))?;
        Ok(HttpHandler {
            shown: redact_url(parsed.as_str()),
            url: parsed,
            client,
            signer,
        })
    }

    /// Posts `task`, with a `traceparent` header (the fire's span) when there is one.
    pub async fn run(&self, task: &Task, traceparent: Option<&str>) -> Result<(), HandlerError> {
        let shown = &self.shown;
        // Serialized here, not by reqwest: the signature is over these very bytes.
        let body = serde_json::to_vec(&task_json(task))
            .map_err(|error| format!("cannot encode the task as JSON: {error}"))?;
        let id = webhook_id(task);
        let timestamp = webhook_timestamp();
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("webhook-timestamp", timestamp);
        if let Some(signer) = &self.signer {
            request = request.header("webhook-signature", signer.sign(&id, timestamp, &body));
        }
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        let mut response = request
            .header("webhook-id", id)
            .body(body)
            .send()
            .await
            // A connect that failed for lack of open files or memory never reached the
            // receiver: the task is put back without spending its attempt.
            .map_err(|error| failure(format!("POST {shown}: {}", describe(&error)), &error))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|value| redact_url(&String::from_utf8_lossy(value.as_bytes())))
                .unwrap_or_else(|| "(none)".to_owned());
            return Err(format!(
                "POST {shown} answered {status}, a redirect, which is not followed \
                 (the POST would be replayed as a GET or lost); Location: {location}: \
                 configure --url with the final address"
            )
            .into());
        }
        let retry_after = retry_after_of(status, response.headers());
        let mut body = Vec::new();
        // Only the start of the body: an error page may be huge or never end.
        while body.len() < BODY_READ_LIMIT {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(BODY_READ_LIMIT);
        drop(response);
        let body = excerpt_start(&body, BODY_EXCERPT);
        let answered = match &retry_after {
            Some(RetryAfterHeader { text, delay: None }) => {
                format!(
                    "{status} with Retry-After {text:?}, not understood: retried on the backoff"
                )
            }
            Some(RetryAfterHeader { text, .. }) => format!("{status} (Retry-After: {text})"),
            None => status.to_string(),
        };
        let message = if body.is_empty() {
            format!("POST {shown} answered {answered}")
        } else {
            format!("POST {shown} answered {answered}: {body}")
        };
        Err(match retry_after.and_then(|header| header.delay) {
            Some(delay) => Box::new(RetryAfter::new(delay, message)),
            None => message.into(),
        })
    }
}

/// A `Retry-After` header of a 429 or 503 answer.
struct RetryAfterHeader {
    /// Its value as shown in messages (cut short).
    text: String,
    /// The delay it asks for; `None` when it is neither delta seconds nor an HTTP date.
    delay: Option<Duration>,
}

/// The `Retry-After` of a 429 (Too Many Requests) or 503 (Service Unavailable) answer; other
/// statuses' are not a request to come back later.
fn retry_after_of(
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
) -> Option<RetryAfterHeader> {
    if !matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        return None;
    }
    let value = headers.get(RETRY_AFTER)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    Some(RetryAfterHeader {
        delay: retry_after_delay(&text, SystemTime::now()),
        text: excerpt_start(text.as_bytes(), RETRY_AFTER_EXCERPT),
    })
}

/// The delay a `Retry-After` value asks for at `now`: delta seconds (`120`) or an HTTP date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`; one already past asks for no delay). `None` for anything
/// else.
fn retry_after_delay(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()) {
        // More digits than a u64 holds is still "much later": the engine caps it.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A transport error without the URL reqwest puts in its message (it may carry
/// credentials), followed by its causes (`connection refused`, `operation timed out`, ...).
fn describe(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    if let Some(url) = error.url() {
        message = message.replace(&format!(" for url ({url})"), "");
    }
    let mut parts = vec![message];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let part = cause.to_string();
        if parts.last() != Some(&part) {
            parts.push(part);
        }
        source = cause.source();
    }
    if error.is_timeout() && !parts.iter().any(|part| part.contains("timed out")) {
        parts.push("timed out".to_owned());
    }
    // Whatever else quotes a URL loses its secrets too.
    redact_text(&parts.join(": "))
}

/// `url` with its `user:password@` replaced by `***@` and its query string by `?***`, for
/// messages and logs; the fragment is dropped. Works on relative URLs (`/path?token=x`) and
/// on text that does not parse.
pub fn redact_url(url: &str) -> String {
    let url = url.split('#').next().unwrap_or_default();
    let (before_query, has_query) = match url.split_once('?') {
        Some((before, _)) => (before, true),
        None => (url, false),
    };
    let mut shown = match before_query.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rfind('@') {
                Some(at) => format!("{scheme}://***@{}{path}", &authority[at + 1..]),
                None => before_query.to_owned(),
            }
        }
        None => before_query.to_owned(),
    };
    if has_query {
        shown.push_str("?***");
    }
    shown
}

/// Any URL inside `text` redacted (a cause may quote one).
fn redact_text(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            if word.contains("://") {
                redact_url(word)
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_and_query() {
        assert_eq!(
            redact_url("http://user:secret@127.0.0.1:8080/hook?token=SECRET#frag"),
            "http://***@127.0.0.1:8080/hook?***"
        );
        assert_eq!(
            redact_url("https://example.com/a/b"),
            "https://example.com/a/b"
        );
        assert_eq!(
            redact_url("https://tok@example.com"),
            "https://***@example.com"
        );
        assert_eq!(redact_url("/landing?token=x"), "/landing?***");
        assert_eq!(
            redact_url("http://host/p@th?q=1"),
            "http://host/p@th?***",
            "an @ in the path is not userinfo"
        );
    }

    #[test]
    fn a_bad_url_is_refused_without_showing_its_secrets() {
        let error =
            HttpHandler::new("ftp://user:secret@host/x?token=SECRET", None).expect_err("ftp");
        assert!(
            !error.contains("secret") && !error.contains("SECRET"),
            "{error}"
        );
        assert!(error.contains("ftp://***@host/x?***"), "{error}");
        let error =
            HttpHandler::new("http://user:secret@[::1/x?token=SECRET", None).expect_err("bad");
        assert!(
            !error.contains("secret") && !error.contains("SECRET"),
            "{error}"
        );
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").expect("a date");
        assert_eq!(retry_after_delay("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after_delay(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            retry_after_delay("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after_delay("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date already past: at once"
        );
        assert_eq!(
            retry_after_delay("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        for bad in ["", "-1", "1.5", "soon", "2 s"] {
            assert_eq!(retry_after_delay(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn only_429_and_503_ask_to_come_back() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            let header = retry_after_of(status, &headers).expect("asked");
            assert_eq!(header.delay, Some(Duration::from_secs(3)));
            assert_eq!(header.text, "3");
        }
        assert!(retry_after_of(StatusCode::INTERNAL_SERVER_ERROR, &headers).is_none());
        assert!(retry_after_of(
            StatusCode::TOO_MANY_REQUESTS,
            &reqwest::header::HeaderMap::new()
        )
        .is_none());
    }

    #[tokio::test]
    async fn transport_errors_do_not_show_the_url_secrets() {
        // A port nothing listens on: connection refused.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        drop(listener);
        let handler = HttpHandler::new(
            &format!("http://user:secret@127.0.0.1:{port}/hook?token=SECRET"),
            None,
        )
        .expect("valid URL");
        assert!(!format!("{handler:?}").contains("secret"));
        let task = Task {
            queue: "q".to_owned(),
            id: "a".to_owned(),
            due_ms: 1,
            fired_ms: 2,
            attempt: 1,
            generation: 1,
            payload: bytes::Bytes::new(),
            node: "n".to_owned(),
        };
        let error = handler
            .run(&task, None)
            .await
            .expect_err("refused")
            .to_string();
        assert!(
            !error.contains("secret") && !error.contains("SECRET"),
            "{error}"
        );
        assert!(
            error.contains(&format!("POST http://***@127.0.0.1:{port}/hook?***")),
            "{error}"
        );
    }
}
