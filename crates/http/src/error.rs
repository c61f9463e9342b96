//! Errors: what a request fails with (an HTTP status and a one-line message, sent as
//! `{"error": "..."}`), and what setting up metrics fails with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use delayq_coordinator::CoordinatorError;
use delayq_engine::EngineError;
use delayq_storage::StorageError;
use serde_json::json;

/// A failed request: its status and message. Messages never carry a Redis password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, one line, naming the value at fault.
    pub message: String,
}

impl ApiError {
    /// An error with this status and message (passwords in URLs are masked).
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: redact_urls(&message.into()),
        }
    }

    /// 400: a bad queue, id, time or body.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: no such task, dead letter or endpoint.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error = %self.message, "request failed");
        }
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let status = match &error {
            EngineError::Storage(storage) => return storage_status(storage, error.to_string()),
            EngineError::InvalidWhen { .. }
            | EngineError::InvalidPayload { .. }
            | EngineError::InvalidSpec(_)
            | EngineError::InvalidLimit { .. } => StatusCode::BAD_REQUEST,
            EngineError::Coordinator(CoordinatorError::InvalidConfig { .. })
            | EngineError::Config(_)
            | EngineError::DuplicateHandler { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            EngineError::UnknownQueue { .. } => StatusCode::NOT_FOUND,
            EngineError::QueueNotEmpty { .. } => StatusCode::CONFLICT,
            EngineError::Coordinator(_)
            | EngineError::ShutDown
            | EngineError::ScheduleContended { .. } => StatusCode::SERVICE_UNAVAILABLE,
            #[allow(unreachable_patterns)]
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.to_string())
    }
}

/// The status of a storage error: the caller's input (400, 413), Redis out of reach or its
/// replicas not confirming a write in time (503), or a fault of ours or of the data (500).
fn storage_status(error: &StorageError, message: String) -> ApiError {
    let status = match error {
        StorageError::InvalidQueueName { .. }
        | StorageError::InvalidTaskId { .. }
        | StorageError::InvalidTraceParent { .. }
        | StorageError::InvalidDue { .. } => StatusCode::BAD_REQUEST,
        StorageError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        StorageError::ConnectionLost { .. }
        | StorageError::Timeout { .. }
        | StorageError::ReplicationTimeout { .. }
        | StorageError::Backend { .. } => {
            ::metrics::counter!("delayq_redis_errors_total").increment(1);
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, message)
}

impl From<StorageError> for ApiError {
    fn from(error: StorageError) -> Self {
        let message = error.to_string();
        storage_status(&error, message)
    }
}

/// Setting up the HTTP layer failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Another metrics recorder is installed in this process already.
    #[error("cannot install the Prometheus recorder: {0}")]
    Recorder(String),
    /// A histogram bucket list was refused.
    #[error("invalid histogram buckets for {metric}: {reason}")]
    Buckets {
        /// The metric.
        metric: &'static str,
        /// Why.
        reason: String,
    },
}

/// `text` with the password of every `scheme://user:password@host` masked as `***`, so an
/// error quoting a Redis URL never shows it.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (head, tail) = rest.split_at(start + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..=colon]);
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_masked() {
        assert_eq!(
            redact_urls("cannot reach redis://app:s3cret@10.0.0.1:6379/0 now"),
            "cannot reach redis://app:***@10.0.0.1:6379/0 now"
        );
        assert_eq!(
            redact_urls("rediss://:pw@h:1 and redis://h:2/0"),
            "rediss://:***@h:1 and redis://h:2/0"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
    }

    #[test]
    fn input_errors_are_400_and_outages_503() {
        let bad: ApiError = EngineError::from(StorageError::InvalidQueueName {
            name: "a b".into(),
            reason: "bad",
        })
        .into();
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        let big: ApiError = StorageError::PayloadTooLarge {
            id: "a".into(),
            size: 2,
            max: 1,
        }
        .into();
        assert_eq!(big.status, StatusCode::PAYLOAD_TOO_LARGE);
        let down: ApiError = StorageError::ConnectionLost {
            operation: "get",
            message: "refused".into(),
        }
        .into();
        assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE);
    }
}
