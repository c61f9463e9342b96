//! One task: schedule (PUT), look up (GET), cancel (DELETE); and many at once (POST).

use std::time::Duration;

use axum::http::HeaderMap;
use axum::Json;
use bytes::Bytes;
use delayq_engine::{ScheduleMode, ScheduleRequest, TraceParent, When};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{queue_name, task_ref, Body, PathParams};
use crate::error::ApiError;
use crate::openapi::{BadRequest, NotFound, TooLarge, Unavailable};
use crate::{json, time, State};

/// A task as a body gives it: its id (bulk only), exactly one of the four forms of its due
/// time, an optional payload and an optional mode (`replace`, the default, `if_absent`,
/// `earlier`, `later`).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TaskBody {
    id: Option<String>,
    delay_ms: Option<u64>,
    due_ms: Option<u64>,
    #[serde(rename = "in")]
    delay: Option<String>,
    at: Option<String>,
    payload: Option<String>,
    mode: Option<String>,
}

impl TaskBody {
    fn mode(&self) -> Result<ScheduleMode, String> {
        match self.mode.as_deref() {
            Some(text) => text
                .parse::<ScheduleMode>()
                .map_err(|error| format!("mode: {error}")),
            None => Ok(ScheduleMode::default()),
        }
    }

    fn when(&self) -> Result<When, String> {
        let given = [
            self.delay_ms.is_some(),
            self.due_ms.is_some(),
            self.delay.is_some(),
            self.at.is_some(),
        ]
        .iter()
        .filter(|given| **given)
        .count();
        if given != 1 {
            return Err(format!(
                "give exactly one of delay_ms, due_ms, in, at (got {given})"
            ));
        }
        if let Some(delay) = self.delay_ms {
            return Ok(When::In(Duration::from_millis(delay)));
        }
        if let Some(due) = self.due_ms {
            return Ok(When::At(due));
        }
        if let Some(delay) = &self.delay {
            return time::parse_delay(delay)
                .map(When::In)
                .map_err(|error| format!("in: {error}"));
        }
        let at = self.at.as_deref().unwrap_or_default();
        time::parse_at(at)
            .map(When::At)
            .map_err(|error| format!("at {at:?}: {error}"))
    }
}

/// The request's W3C `traceparent` header, which the fire's span links to. One that does not
/// parse is ignored, as the trace context specification says (tracing never fails a
/// schedule).
fn traceparent_of(headers: &HeaderMap) -> Option<TraceParent> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    match TraceParent::parse(value) {
        Ok(parent) => Some(parent),
        Err(error) => {
            tracing::debug!(%error, "ignoring the request's traceparent");
            None
        }
    }
}

/// Schedules one task in its mode (replace by default); answers as `delayq schedule`.
#[utoipa::path(put, path = "/queues/{queue}/tasks/{id}", tag = "tasks", operation_id = "schedule_task", params(("queue" = String, Path, description = "The queue"), ("id" = String, Path, description = "The task id"), ("traceparent" = Option<String>, Header, description = "W3C trace context of the caller: the fire's span links to it (ignored when malformed)")),
    request_body(content = TaskBody, description = "Exactly one of delay_ms, due_ms, in (a duration like \"30s\") and at (RFC 3339); an optional payload and mode (replace, if_absent, earlier, later); id, when given, must be the path's"),
    responses((status = 200, description = "Scheduled: {\"queue\",\"id\",\"due_ms\",\"replaced\",\"duplicate\",\"kept\"} as `delayq schedule --json`", body = Object), BadRequest, TooLarge, Unavailable))]
pub(crate) async fn schedule(
    state: State,
    PathParams((queue, id)): PathParams<(String, String)>,
    headers: HeaderMap,
    Body(body): Body<TaskBody>,
) -> Result<Json<Value>, ApiError> {
    task_ref(&queue, &id)?;
    if body.id.as_ref().is_some_and(|given| *given != id) {
        return Err(ApiError::bad_request(format!(
            "the body's id {:?} differs from the path's {id:?}",
            body.id.unwrap_or_default()
        )));
    }
    let when = body.when().map_err(ApiError::bad_request)?;
    let mode = body.mode().map_err(ApiError::bad_request)?;
    let payload = Bytes::from(body.payload.unwrap_or_default());
    let request = ScheduleRequest::new(id, when, payload)
        .with_mode(mode)
        .with_traceparent(traceparent_of(&headers));
    let scheduled = state.scheduler.schedule_request(&queue, request).await?;
    Ok(Json(json!(scheduled)))
}

/// Schedules many tasks of one queue, each in its own `"mode"`:
/// `{"scheduled","replaced","duplicates","kept","failed"}` as `delayq schedule --from`
/// prints, plus `"errors":[{"index","error"}]`. A bad item (a bad mode too) fails alone,
/// reported by its index.
#[utoipa::path(post, path = "/queues/{queue}/tasks", tag = "tasks", operation_id = "schedule_tasks", params(("queue" = String, Path, description = "The queue"), ("traceparent" = Option<String>, Header, description = "W3C trace context of the caller: every task's fire links to it (ignored when malformed)")),
    request_body(content = Vec<TaskBody>, description = "At most 10,000 tasks (more is a 400), each with its id, one of delay_ms, due_ms, in, at, and an optional mode"),
    responses((status = 200, description = "{\"scheduled\",\"replaced\",\"duplicates\",\"kept\",\"failed\",\"errors\":[{\"index\",\"error\"}],\"errors_truncated\"}: a bad item fails alone; errors lists the first 100 failed items, failed counts them all", body = Object), BadRequest, TooLarge, Unavailable))]
pub(crate) async fn schedule_many(
    state: State,
    PathParams(queue): PathParams<String>,
    headers: HeaderMap,
    Body(BulkItems(items)): Body<BulkItems>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let traceparent = traceparent_of(&headers);
    let mut errors = Vec::new();
    let mut requests = Vec::new();
    let mut indexes = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let parsed = serde_json::from_value::<TaskBody>(item)
            .map_err(|error| error.to_string())
            .and_then(|item| match &item.id {
                Some(id) => Ok((id.clone(), item.when()?, item.mode()?, item)),
                None => Err("missing field `id`".to_owned()),
            });
        match parsed {
            Ok((id, when, mode, item)) => {
                indexes.push(index);
                requests.push(ScheduleRequest {
                    id,
                    when,
                    payload: Bytes::from(item.payload.unwrap_or_default()),
                    mode,
                    traceparent: traceparent.clone(),
                });
            }
            Err(error) => errors.push(json!({ "index": index, "error": error })),
        }
    }
    let (mut scheduled, mut replaced, mut duplicates, mut kept) = (0u64, 0u64, 0u64, 0u64);
    if !requests.is_empty() {
        let results = state.scheduler.schedule_many(&queue, requests).await?;
        for (index, result) in indexes.into_iter().zip(results) {
            match result {
                Ok(outcome) if outcome.duplicate => duplicates += 1,
                Ok(outcome) if outcome.kept => kept += 1,
                Ok(outcome) => {
                    scheduled += 1;
                    replaced += u64::from(outcome.replaced);
                }
                Err(error) => {
                    let message = ApiError::from(error).message;
                    errors.push(json!({ "index": index, "error": message }));
                }
            }
        }
    }
    errors.sort_by_key(|error| error["index"].as_u64());
    let failed = errors.len();
    errors.truncate(MAX_REPORTED_ERRORS);
    Ok(Json(json!({
        "scheduled": scheduled,
        "replaced": replaced,
        "duplicates": duplicates,
        "kept": kept,
        "failed": failed,
        "errors": errors,
        "errors_truncated": failed > MAX_REPORTED_ERRORS,
    })))
}

/// The most tasks one bulk body may hold; more is refused (400 naming the bound) as soon as
/// the reader meets the first item over it.
pub(crate) const MAX_BULK_ITEMS: usize = 10_000;

/// The most failed items a bulk answer lists (the lowest indexes); `failed` counts them all.
pub(crate) const MAX_REPORTED_ERRORS: usize = 100;

/// The items of a bulk body, at most [`MAX_BULK_ITEMS`]: the list is read item by item and
/// refused at the first item over the bound, so a body of a million `{}` never becomes a
/// million values in memory.
pub(crate) struct BulkItems(Vec<Value>);

impl<'de> serde::Deserialize<'de> for BulkItems {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Items;
        impl<'de> serde::de::Visitor<'de> for Items {
            type Value = BulkItems;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(formatter, "a list of at most {MAX_BULK_ITEMS} tasks")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<BulkItems, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(item) = seq.next_element::<Value>()? {
                    if items.len() == MAX_BULK_ITEMS {
                        return Err(serde::de::Error::custom(format!(
                            "too many tasks: at most {MAX_BULK_ITEMS} per request"
                        )));
                    }
                    items.push(item);
                }
                Ok(BulkItems(items))
            }
        }
        deserializer.deserialize_seq(Items)
    }
}

/// The task as `delayq get` prints it; 404 when unknown.
#[utoipa::path(get, path = "/queues/{queue}/tasks/{id}", tag = "tasks", operation_id = "get_task", params(("queue" = String, Path, description = "The queue"), ("id" = String, Path, description = "The task id")),
    responses((status = 200, description = "The task as `delayq get --json`: queue, id, state, due_ms, attempt, generation, payload (or payload_base64), last_error, state_since_ms", body = Object), BadRequest, NotFound, Unavailable))]
pub(crate) async fn get(
    state: State,
    PathParams((queue, id)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    task_ref(&queue, &id)?;
    match state.scheduler.get(&queue, &id).await? {
        Some(info) => Ok(Json(json::task(&queue, &info))),
        None => Err(ApiError::not_found(format!(
            "task {id:?} not found in queue {queue:?}"
        ))),
    }
}

/// Cancels the task; answers as `delayq cancel`.
#[utoipa::path(delete, path = "/queues/{queue}/tasks/{id}", tag = "tasks", operation_id = "cancel_task", params(("queue" = String, Path, description = "The queue"), ("id" = String, Path, description = "The task id")),
    responses((status = 200, description = "{\"cancelled\":true|false}, plus \"state\":\"inflight\" when its handler was running", body = Object), BadRequest, Unavailable))]
pub(crate) async fn cancel(
    state: State,
    PathParams((queue, id)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    task_ref(&queue, &id)?;
    let outcome = state.scheduler.cancel(&queue, &id).await?;
    Ok(Json(json::cancelled(outcome)))
}
