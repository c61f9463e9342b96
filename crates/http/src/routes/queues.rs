//! Queues: counts, upcoming tasks, and the dead letters (list, retry, purge).

use axum::Json;
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
