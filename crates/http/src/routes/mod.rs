//! The handlers of the API, one file per area, and the extractors they share: a JSON body
//! whose rejection is a JSON error, and path parts checked as queue names and task ids.

pub(crate) mod cluster;
pub(crate) mod queues;
pub(crate) mod tasks;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, Uri};
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

/// A JSON body; a body that is too large is 413, anything else wrong with it 400, both as
/// JSON errors.
pub(crate) struct Body<T>(pub(crate) T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(body_error(rejection)),
        }
    }
}

fn body_error(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(
            status,
            "request body too large: it exceeds engine.max_payload plus 64 KiB",
        );
    }
    let status = if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        status
    } else {
        StatusCode::BAD_REQUEST
    };
    ApiError::new(status, format!("invalid body: {}", rejection.body_text()))
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
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limit {
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
