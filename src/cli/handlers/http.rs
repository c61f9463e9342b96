//! `--handler http --url URL`: POSTs each task as JSON.
//!
//! Only a 2xx answer to our POST acks a task. Redirects are not followed: reqwest's default
//! policy turns a POST answered with 301/302/303 into a GET, so an `http://` URL redirected
//! to `https://` would ack tasks whose POST never reached the receiver. A 3xx fails the
//! attempt instead and names the `Location` to configure. Secrets in the URL (its
//! `user:password@` and its query string, where tokens usually sit) never reach an error,
//! a task's `last_error` or a log line.

use std::fmt;
use std::time::Duration;

use delayq_engine::{HandlerError, Task};

use super::{excerpt_start, failure, task_json};

/// How long connecting to the receiver may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one whole request may take (the queue's `timeout` ends it earlier when shorter).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a non-2xx response body is read; the rest is never downloaded.
const BODY_READ_LIMIT: usize = 4096;
/// How much of that body goes into the task's `last_error`.
const BODY_EXCERPT: usize = 300;

/// POSTs `{"queue","id","due_ms","fired_ms","attempt","generation","node","payload"}` per task
/// (`payload_base64` instead of `payload` when the payload is not UTF-8). A 2xx status acks;
/// any other status (a redirect included), or a transport error, fails the attempt, except
/// a connection that could not be made for lack of the node's resources (`EMFILE`, ...):
/// that task is put back with its attempt unspent.
pub struct HttpHandler {
    url: reqwest::Url,
    /// `url` with its credentials and query hidden, for messages.
    shown: String,
    client: reqwest::Client,
}

impl fmt::Debug for HttpHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpHandler")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

impl HttpHandler {
    /// A handler posting to `url` (http or https). Fails on a bad URL.
    pub fn new(url: &str) -> Result<Self, String> {
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
        })
    }

    /// Posts `task`.
    pub async fn run(&self, task: &Task) -> Result<(), HandlerError> {
        let shown = &self.shown;
        let mut response = self
            .client
            .post(self.url.clone())
            .json(&task_json(task))
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
        Err(if body.is_empty() {
            format!("POST {shown} answered {status}")
        } else {
            format!("POST {shown} answered {status}: {body}")
        }
        .into())
    }
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
        let error = HttpHandler::new("ftp://user:secret@host/x?token=SECRET").expect_err("ftp");
        assert!(
            !error.contains("secret") && !error.contains("SECRET"),
            "{error}"
        );
        assert!(error.contains("ftp://***@host/x?***"), "{error}");
        let error = HttpHandler::new("http://user:secret@[::1/x?token=SECRET").expect_err("bad");
        assert!(
            !error.contains("secret") && !error.contains("SECRET"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn transport_errors_do_not_show_the_url_secrets() {
        // A port nothing listens on: connection refused.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        drop(listener);
        let handler = HttpHandler::new(&format!(
            "http://user:secret@127.0.0.1:{port}/hook?token=SECRET"
        ))
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
        let error = handler.run(&task).await.expect_err("refused").to_string();
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
