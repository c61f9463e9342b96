//! Recurring schedules: upsert (PUT), list, look up (GET), delete, pause and resume.
//!
//! The spec's body is [`RawSpec`] as the command line's flags give it (unknown fields are
//! refused); it is validated before anything is stored, so a bad field is a 400 naming the
//! field and the value, and nothing changes.

use axum::Json;
use delayq_engine::recurring::{RawSpec, RecurringSchedule, ScheduleName, SpecError};
use serde_json::{json, Value};

use super::{Body, PathParams};
use crate::error::ApiError;
use crate::{json, State};

/// Checks a schedule name from the path (400 naming it when invalid).
fn schedule_name(name: &str) -> Result<(), ApiError> {
    ScheduleName::new(name)
        .map(|_| ())
        .map_err(|error| ApiError::bad_request(error.to_string()))
}

fn no_schedule(name: &str) -> ApiError {
    ApiError::not_found(format!("recurring schedule {name:?} not found"))
}

/// The schedule as `delayq recurring get` prints it, or 404.
fn found(name: &str, schedule: Option<RecurringSchedule>) -> Result<Json<Value>, ApiError> {
    schedule
        .map(|schedule| Json(json::recurring(&schedule)))
        .ok_or_else(|| no_schedule(name))
}

/// The fields of a spec's body that are text; the `NUMERIC` ones may also be non-negative
/// integers.
const TEXT_FIELDS: [&str; 11] = [
    "queue",
    "cron",
    "tz",
    "every",
    "payload",
    "misfire",
    "misfire_grace",
    "max_catchup",
    "overlap",
    "start_at",
    "end_at",
];
const NUMERIC: [&str; 3] = ["max_catchup", "start_at", "end_at"];

/// The body as a [`RawSpec`]. A field of the wrong type is refused naming the field and the
/// value (serde alone would only say "invalid type"), an unknown field naming it.
fn raw_spec(body: Value) -> Result<RawSpec, ApiError> {
    let Value::Object(fields) = &body else {
        return Err(ApiError::bad_request(format!(
            "invalid body: expected a JSON object with the spec's fields, got {body}"
        )));
    };
    for (key, value) in fields {
        let Some(field) = TEXT_FIELDS.iter().find(|field| **field == key.as_str()) else {
            continue;
        };
        let numeric = NUMERIC.contains(field);
        let fits = value.is_string() || value.is_null() || (numeric && value.is_u64());
        if !fits {
            let reason = if numeric {
                "expected a string or a non-negative integer"
            } else {
                "expected a string"
            };
            let error = SpecError::new(field, value.to_string(), reason);
            return Err(ApiError::bad_request(error.to_string()));
        }
    }
    serde_json::from_value(body)
        .map_err(|error| ApiError::bad_request(format!("invalid body: {error}")))
}

/// Creates or updates the schedule; answers as `delayq recurring set`:
/// `{"name","queue","next_ms","result":"created|updated|unchanged"}`.
pub(crate) async fn set(
    state: State,
    PathParams(name): PathParams<String>,
    Body(body): Body<Value>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let spec = raw_spec(body)?
        .validate()
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    let set = state.scheduler.set_recurring(&name, spec).await?;
    Ok(Json(json::recurring_set(&set)))
}

/// Every schedule, sorted by name, as `delayq recurring list --json`.
pub(crate) async fn list(state: State) -> Result<Json<Value>, ApiError> {
    let schedules = state.scheduler.list_recurring().await?;
    Ok(Json(Value::Array(
        schedules.iter().map(json::recurring).collect(),
    )))
}

/// One schedule, or 404.
pub(crate) async fn get(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let schedule = state.scheduler.recurring(&name).await?;
    found(&name, schedule)
}

/// Deletes the schedule and cancels its pending tick: `{"name","deleted":true}`, or 404.
pub(crate) async fn delete(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    if state.scheduler.delete_recurring(&name).await? {
        Ok(Json(json!({ "name": name, "deleted": true })))
    } else {
        Err(no_schedule(&name))
    }
}

/// Pauses the schedule; answers with it (`"paused": true`), or 404.
pub(crate) async fn pause(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let schedule = state.scheduler.pause_recurring(&name).await?;
    found(&name, schedule)
}

/// Resumes the schedule with its first tick after now; answers with it, or 404.
pub(crate) async fn resume(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let schedule = state.scheduler.resume_recurring(&name).await?;
    found(&name, schedule)
}
