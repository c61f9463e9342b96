//! Queues: counts, upcoming tasks, the flow keys holding tasks back, and the dead letters
//! (list, retry, purge).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use delayq_engine::EngineError;
use serde_json::Value;

use super::{queue_name, task_ref, Limit, PathParams, QueryParams};
use crate::error::ApiError;
use crate::openapi::{BadRequest, Conflict, NotFound, Unavailable};
use crate::{json, State};

/// Per-queue counts as `delayq stats --json`.
#[utoipa::path(get, path = "/queues", tag = "queues", operation_id = "list_queues",
    responses((status = 200, description = "{\"<queue>\":{\"pending\",\"due_now\",\"inflight\",\"dead\",\"done\",\"held_back\",\"paused\"}} as `delayq stats --json` (held_back: due tasks waiting for their flow key, counted in pending and due_now too)", body = Object), Unavailable))]
pub(crate) async fn stats(state: State) -> Result<Json<Value>, ApiError> {
    let stats = state.scheduler.stats().await?;
    let paused = state.scheduler.paused_queues().await?;
    Ok(Json(json::stats(&stats, &paused)))
}

/// The next pending tasks by due time, payloads cut to a preview.
#[utoipa::path(get, path = "/queues/{queue}/pending", tag = "queues", operation_id = "list_pending_tasks", params(("queue" = String, Path, description = "The queue"), Limit),
    responses((status = 200, description = "The next pending tasks by due time as `delayq pending --json`: queue, id, due_ms, attempt, generation, payload (or payload_base64) cut to its first 256 bytes, payload_bytes (the whole size), payload_truncated, last_error; GET the task for the whole payload", body = Vec<Object>), BadRequest, Unavailable))]
pub(crate) async fn pending(
    state: State,
    PathParams(queue): PathParams<String>,
    QueryParams(limit): QueryParams<Limit>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let tasks = state.scheduler.pending(&queue, limit.get()?).await?;
    Ok(Json(json::pending(&queue, &tasks)))
}

/// The flow keys holding tasks back, the most waiting first (empty for an unknown queue or a
/// queue without `flow_keys`, as the other listings answer for an unknown queue).
#[utoipa::path(get, path = "/queues/{queue}/keys", tag = "queues", operation_id = "list_held_keys", params(("queue" = String, Path, description = "The queue"), Limit),
    responses((status = 200, description = "The flow keys holding tasks back as `delayq keys --json`, the most waiting first: queue, key, running (tasks of the key holding a slot), waiting (held back), oldest_due_ms (the earliest due among the waiting), longest_wait_ms (how long that one has waited, on the cluster clock)", body = Vec<Object>), BadRequest, Unavailable))]
pub(crate) async fn keys(
    state: State,
    PathParams(queue): PathParams<String>,
    QueryParams(limit): QueryParams<Limit>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let keys = state.scheduler.held_keys(&queue, limit.get()?).await?;
    let now_ms = state.scheduler.now_ms();
    Ok(Json(json::held_keys(&queue, &keys, now_ms)))
}

/// Dead letters, oldest first, with their last error, payloads cut to a preview.
#[utoipa::path(get, path = "/queues/{queue}/dead", tag = "dead letters", operation_id = "list_dead_letters", params(("queue" = String, Path, description = "The queue"), Limit),
    responses((status = 200, description = "Dead letters, oldest first, as `delayq dead --json`: queue, id, due_ms, attempt, failed_ms, last_error, payload (or payload_base64) cut to its first 256 bytes, payload_bytes (the whole size), payload_truncated; GET the task for the whole payload", body = Vec<Object>), BadRequest, Unavailable))]
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
#[utoipa::path(post, path = "/queues/{queue}/dead/{id}/retry", tag = "dead letters", operation_id = "retry_dead_letter", params(("queue" = String, Path, description = "The queue"), ("id" = String, Path, description = "The dead letter's task id")),
    responses((status = 200, description = "{\"retried\":1}", body = Object), BadRequest, NotFound, Unavailable))]
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
#[utoipa::path(post, path = "/queues/{queue}/dead/retry", tag = "dead letters", operation_id = "retry_all_dead_letters", params(("queue" = String, Path, description = "The queue")),
    responses((status = 200, description = "{\"retried\":N}", body = Object), BadRequest, Unavailable))]
pub(crate) async fn retry_all(
    state: State,
    PathParams(queue): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let count = state.scheduler.retry_all_dead(&queue).await?;
    Ok(Json(json::retried(count)))
}

/// Deletes one dead letter; 404 when it is not dead.
#[utoipa::path(delete, path = "/queues/{queue}/dead/{id}", tag = "dead letters", operation_id = "purge_dead_letter", params(("queue" = String, Path, description = "The queue"), ("id" = String, Path, description = "The dead letter's task id")),
    responses((status = 200, description = "{\"purged\":1}", body = Object), BadRequest, NotFound, Unavailable))]
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
#[utoipa::path(delete, path = "/queues/{queue}/dead", tag = "dead letters", operation_id = "purge_all_dead_letters", params(("queue" = String, Path, description = "The queue")),
    responses((status = 200, description = "{\"purged\":N}", body = Object), BadRequest, Unavailable))]
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
#[utoipa::path(post, path = "/queues/{queue}/pause", tag = "queues", operation_id = "pause_queue", params(("queue" = String, Path, description = "The queue")),
    responses((status = 200, description = "{\"queue\",\"paused\":true}: within 100 ms no node claims a task of the queue", body = Object), BadRequest, NotFound, Unavailable))]
pub(crate) async fn pause(
    state: State,
    PathParams(queue): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    state.scheduler.pause_queue(&queue).await?;
    Ok(Json(serde_json::json!({ "queue": queue, "paused": true })))
}

/// Resumes the queue; its backlog fires at once; `{"queue","paused":false}`.
#[utoipa::path(post, path = "/queues/{queue}/resume", tag = "queues", operation_id = "resume_queue", params(("queue" = String, Path, description = "The queue")),
    responses((status = 200, description = "{\"queue\",\"paused\":false}", body = Object), BadRequest, NotFound, Unavailable))]
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
#[utoipa::path(delete, path = "/queues/{queue}", tag = "queues", operation_id = "delete_queue", params(("queue" = String, Path, description = "The queue"), ("force" = Option<bool>, Query, description = "Delete even when the queue holds tasks")),
    responses((status = 200, description = "{\"queue\",\"deleted\":true,\"tasks\":N}: every key of the queue removed on every master", body = Object), BadRequest, NotFound, Conflict, Unavailable))]
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
