//! The handlers of the API, one file per area, and the extractors they share: a JSON body
//! whose rejection is a JSON error, and path parts checked as queue names and task ids.

pub(crate) mod cluster;
pub(crate) mod queues;
pub(crate) mod recurring;
pub(crate) mod tasks;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use bytes::Bytes;
use delayq_storage::{QueueName, TaskId};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// `{"error":"no such endpoint"}` with 404.
pub(crate) async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no such endpoint: {}", uri.path()))
}

/// `{"error":...}` with 405.
pub(crate) async fn method_not_allowed(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method not allowed on {}", uri.path()),
    )
}

/// A JSON body, whatever its `Content-Type` says (clients in other languages and `curl -d`
/// often send none, or a form type): too large is 413, anything else wrong with it 400,
/// both as JSON errors naming what is wrong.
pub(crate) struct Body<T>(pub(crate) T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        // `Bytes` honours the router's `DefaultBodyLimit`.
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request body too large: it exceeds six times engine.max_payload plus 64 KiB (a payload is bounded by engine.max_payload once decoded)",
                    )
                } else {
                    ApiError::bad_request(format!("invalid body: {}", rejection.body_text()))
                }
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request(
                "invalid body: it is empty; expected a JSON document",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(Body)
            .map_err(|error| ApiError::bad_request(format!("invalid body: {error}")))
    }
}

/// Path parameters; a part that cannot be read (bad percent-encoding, not UTF-8) is a 400
/// JSON error.
pub(crate) struct PathParams<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| PathParams(value))
            .map_err(|rejection| {
                ApiError::bad_request(format!("invalid path: {}", rejection.body_text()))
            })
    }
}

/// The query string; an unknown parameter or a value of the wrong type is a 400 JSON
/// error naming it.
pub(crate) struct QueryParams<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| QueryParams(value))
            .map_err(|rejection| {
                ApiError::bad_request(format!("invalid query: {}", rejection.body_text()))
            })
    }
}

/// Checks a queue name from the path (400 naming it when invalid).
pub(crate) fn queue_name(queue: &str) -> Result<(), ApiError> {
    QueueName::new(queue)
        .map(|_| ())
        .map_err(|error| ApiError::bad_request(error.to_string()))
}

/// Checks a queue name and a task id from the path.
pub(crate) fn task_ref(queue: &str, id: &str) -> Result<(), ApiError> {
    queue_name(queue)?;
    TaskId::new(id)
        .map(|_| ())
        .map_err(|error| ApiError::bad_request(error.to_string()))
}

/// `?limit=N` of the listings: 1..=1000, default 20.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct Limit {
    /// How many records to read, 1..=1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

impl Limit {
    pub(crate) fn get(&self) -> Result<usize, ApiError> {
        let max = delayq_engine::admin::MAX_LIST_LIMIT;
        match self.limit {
            None => Ok(20),
            Some(limit) if (1..=max).contains(&limit) => Ok(limit),
            Some(limit) => Err(ApiError::bad_request(format!(
                "invalid limit {limit}: expected 1..={max}"
            ))),
        }
    }
}
