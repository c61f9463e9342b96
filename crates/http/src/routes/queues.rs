//! Queues: counts, upcoming tasks, and the dead letters (list, retry, purge).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use delayq_engine::EngineError;
use serde_json::Value;

use super::{queue_name, task_ref, Limit, PathParams, QueryParams};
use crate::error::ApiError;
use crate::{json, State};

/// Per-queue counts as `delayq stats --json`.
pub(crate) async fn stats(state: State) -> Result<Json<Value>, ApiError> {
    let stats = state.scheduler.stats().await?;
    let paused = state.scheduler.paused_queues().await?;
    Ok(Json(json::stats(&stats, &paused)))
}

/// The next pending tasks by due time.
pub(crate) async fn pending(
    state: State,
    PathParams(queue): PathParams<String>,
    QueryParams(limit): QueryParams<Limit>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let tasks = state.scheduler.pending(&queue, limit.get()?).await?;
    Ok(Json(json::pending(&queue, &tasks)))
}

/// Dead letters, oldest first, with their last error.
pub(crate) async fn dead(
    state: State,
    PathParams(queue): PathParams<String>,
    QueryParams(limit): QueryParams<Limit>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let tasks = state.scheduler.dead_letters(&queue, limit.get()?).await?;
    Ok(Json(json::dead(&queue, &tasks)))
}

/// Retries one dead letter (due now, attempt 1); 404 when it is not dead.
pub(crate) async fn retry_one(
    state: State,
    PathParams((queue, id)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    task_ref(&queue, &id)?;
    if state.scheduler.retry_dead(&queue, &id).await? {
        Ok(Json(json::retried(1)))
    } else {
        Err(no_dead_letter(&queue, &id))
    }
}

/// Retries every dead letter of the queue.
pub(crate) async fn retry_all(
    state: State,
    PathParams(queue): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let count = state.scheduler.retry_all_dead(&queue).await?;
    Ok(Json(json::retried(count)))
}

/// Deletes one dead letter; 404 when it is not dead.
pub(crate) async fn purge_one(
    state: State,
    PathParams((queue, id)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    task_ref(&queue, &id)?;
    if state.scheduler.purge_dead(&queue, &id).await? {
        Ok(Json(json::purged(1)))
    } else {
        Err(no_dead_letter(&queue, &id))
    }
}

/// Deletes every dead letter of the queue.
pub(crate) async fn purge_all(
    state: State,
    PathParams(queue): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let count = state.scheduler.purge_all_dead(&queue).await?;
    Ok(Json(json::purged(count)))
}

fn no_dead_letter(queue: &str, id: &str) -> ApiError {
    ApiError::not_found(format!("no dead letter {id:?} in queue {queue:?}"))
}

/// Pauses the queue cluster-wide; `{"queue","paused":true}`; 404 for an unknown queue.
pub(crate) async fn pause(
    state: State,
    PathParams(queue): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    state.scheduler.pause_queue(&queue).await?;
    Ok(Json(serde_json::json!({ "queue": queue, "paused": true })))
}

/// Resumes the queue; its backlog fires at once; `{"queue","paused":false}`.
pub(crate) async fn resume(
    state: State,
    PathParams(queue): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    state.scheduler.resume_queue(&queue).await?;
    Ok(Json(serde_json::json!({ "queue": queue, "paused": false })))
}

/// `?force=true` of a queue deletion.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Force {
    force: Option<bool>,
}

/// Deletes the queue and all its keys; `{"queue","deleted":true,"tasks":N}`. Without
/// `?force=true`, a queue holding pending, in-flight or dead tasks is refused with 409 and
/// `{"error","queue","pending","inflight","dead"}`; 404 for an unknown queue.
pub(crate) async fn delete(
    state: State,
    PathParams(queue): PathParams<String>,
    QueryParams(force): QueryParams<Force>,
) -> Result<Response, ApiError> {
    queue_name(&queue)?;
    match state
        .scheduler
        .delete_queue(&queue, force.force.unwrap_or(false))
        .await
    {
        Ok(tasks) => Ok(Json(json::queue_deleted(&queue, tasks)).into_response()),
        Err(error) => {
            let EngineError::QueueNotEmpty {
                pending,
                inflight,
                dead,
                ..
            } = &error
            else {
                return Err(error.into());
            };
            let body = serde_json::json!({
                "error": error.to_string(),
                "queue": queue,
                "pending": pending,
                "inflight": inflight,
                "dead": dead,
            });
            Ok((StatusCode::CONFLICT, Json(body)).into_response())
        }
    }
}
