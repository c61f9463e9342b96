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
use crate::{json, schemas, time, State};

/// A task as a body gives it: its id (bulk only), exactly one of the four forms of its due
/// time, an optional payload and an optional mode (`replace`, the default, `if_absent`,
/// `earlier`, `later`). Its schema in the document is [`crate::schemas::task_body`] (and
/// [`crate::schemas::bulk_task`] with the id); [`TaskBody::read`] enforces it.
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

/// A task read from a body and checked: everything the document's schema says, so a body
/// the schema refuses is a 400 and one it allows reaches the scheduler.
struct ReadTask {
    id: Option<String>,
    when: When,
    mode: ScheduleMode,
    payload: Option<String>,
}

impl TaskBody {
    /// Reads and checks one task object: no unknown field, no `null` (a field is given or
    /// left out), integers where the schema says integer (`5.0` is one, as JSON Schema
    /// counts), exactly one due form in range, a known mode, and (when `id_required`) a valid
    /// id.
    fn read(mut value: Value, id_required: bool) -> Result<ReadTask, String> {
        let Value::Object(fields) = &mut value else {
            return Err(format!("expected a JSON object, got {value}"));
        };
        for (key, field) in fields.iter_mut() {
            if field.is_null() {
                return Err(format!(
                    "{key}: null is not a value; leave the field out instead"
                ));
            }
            if key == "delay_ms" || key == "due_ms" {
                if let Some(whole) = whole_number(field) {
                    *field = Value::from(whole);
                }
            }
        }
        let body: TaskBody = serde_json::from_value(value).map_err(|error| error.to_string())?;
        match &body.id {
            Some(id) => {
                delayq_storage::TaskId::new(id).map_err(|error| error.to_string())?;
            }
            None if id_required => return Err("missing field `id`".to_owned()),
            None => {}
        }
        Ok(ReadTask {
            when: body.when()?,
            mode: body.mode()?,
            id: body.id,
            payload: body.payload,
        })
    }

    fn mode(&self) -> Result<ScheduleMode, String> {
        match self.mode.as_deref() {
            Some(text) if schemas::MODES.contains(&text) => text
                .parse::<ScheduleMode>()
                .map_err(|error| format!("mode: {error}")),
            Some(text) => Err(format!(
                "mode: unknown schedule mode {text:?} (expected replace, if_absent, earlier or later)"
            )),
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
            if delay > schemas::MAX_DELAY_MS {
                return Err(format!(
                    "delay_ms {delay}: at most {} (about 3,170 years)",
                    schemas::MAX_DELAY_MS
                ));
            }
            return Ok(When::In(Duration::from_millis(delay)));
        }
        if let Some(due) = self.due_ms {
            // The rule of the CLI's --at: a number below 10^11 looks like seconds.
            return time::parse_at(&due.to_string())
                .map(When::At)
                .map_err(|error| format!("due_ms {due}: {error}"));
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

/// A JSON number with no fraction (`5.0`), as a `u64`; `None` for anything else.
pub(crate) fn whole_number(value: &Value) -> Option<u64> {
    let number = value
        .as_f64()
        .filter(|_| !value.is_u64() && !value.is_i64())?;
    // 2^64 as an f64: the first value over u64::MAX.
    let fits = number.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&number);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fits.then_some(number as u64)
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
    Body(body): Body<Value>,
) -> Result<Json<Value>, ApiError> {
    task_ref(&queue, &id)?;
    let task = TaskBody::read(body, false)
        .map_err(|error| ApiError::bad_request(format!("invalid body: {error}")))?;
    if task.id.as_ref().is_some_and(|given| *given != id) {
        return Err(ApiError::bad_request(format!(
            "the body's id {:?} differs from the path's {id:?}",
            task.id.unwrap_or_default()
        )));
    }
    let payload = Bytes::from(task.payload.unwrap_or_default());
    let request = ScheduleRequest::new(id, task.when, payload)
        .with_mode(task.mode)
        .with_traceparent(traceparent_of(&headers));
    let scheduled = state.scheduler.schedule_request(&queue, request).await?;
    Ok(Json(json!(scheduled)))
}

/// Schedules many tasks of one queue, each in its own `"mode"`:
/// `{"scheduled","replaced","duplicates","kept","failed"}` as `delayq schedule --from`
/// prints, plus `"errors":[{"index","error"}]`. A body with a malformed item (what the
/// document's schema refuses: an unknown field, a wrong type, a bad id, not exactly one due
/// form, a bad mode) is refused whole with 400 naming the item's index, and nothing of it is
/// scheduled; an item the store refuses (a payload over `max_payload`) fails alone.
#[utoipa::path(post, path = "/queues/{queue}/tasks", tag = "tasks", operation_id = "schedule_tasks", params(("queue" = String, Path, description = "The queue"), ("traceparent" = Option<String>, Header, description = "W3C trace context of the caller: every task's fire links to it (ignored when malformed)")),
    request_body(content = Vec<TaskBody>, description = "At most 10,000 tasks, each with its id, one of delay_ms, due_ms, in, at, and an optional payload and mode; a malformed item refuses the whole body (400 naming its index)"),
    responses((status = 200, description = "{\"scheduled\",\"replaced\",\"duplicates\",\"kept\",\"failed\",\"errors\":[{\"index\",\"error\"}],\"errors_truncated\"}: an item the store refuses fails alone; errors lists the first 100 failed items, failed counts them all", body = Object), BadRequest, TooLarge, Unavailable))]
pub(crate) async fn schedule_many(
    state: State,
    PathParams(queue): PathParams<String>,
    headers: HeaderMap,
    Body(BulkItems(items)): Body<BulkItems>,
) -> Result<Json<Value>, ApiError> {
    queue_name(&queue)?;
    let traceparent = traceparent_of(&headers);
    let mut errors = Vec::new();
    let mut requests = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let task = TaskBody::read(item, true).map_err(|error| {
            ApiError::bad_request(format!(
                "invalid task at index {index}: {error} (nothing was scheduled)"
            ))
        })?;
        requests.push(ScheduleRequest {
            id: task.id.unwrap_or_default(),
            when: task.when,
            payload: Bytes::from(task.payload.unwrap_or_default()),
            mode: task.mode,
            traceparent: traceparent.clone(),
        });
    }
    let indexes = 0..requests.len();
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
