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
use crate::openapi::{BadRequest, NotFound, TooLarge, Unavailable};
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

/// The fields of a spec's body, all text; the `NUMERIC` ones may also be non-negative
/// integers.
const TEXT_FIELDS: [&str; 11] = RawSpec::FIELDS;
const NUMERIC: [&str; 3] = ["max_catchup", "start_at", "end_at"];

/// The body of `PUT /v1/recurring/{name}` as the OpenAPI document shows it: the fields of
/// [`RawSpec`] (which lives in the engine, without a schema), checked against
/// [`TEXT_FIELDS`] by a test so the two cannot drift apart.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used; the body is read as a `RawSpec`.
pub(crate) struct RecurringBody {
    /// The queue the ticks go to (required).
    queue: String,
    /// A cron expression (exactly one of `cron` and `every`).
    cron: Option<String>,
    /// The IANA zone of `cron` (default `UTC`; refused with `every`).
    tz: Option<String>,
    /// A duration of at least 1 s, like `"5m"` (exactly one of `cron` and `every`).
    every: Option<String>,
    /// The payload of every tick.
    payload: Option<String>,
    /// `skip`, `once` (default) or `all`.
    misfire: Option<String>,
    /// A duration (default `1m`).
    misfire_grace: Option<String>,
    /// 1..=10000 (default 100), a number or a string.
    max_catchup: Option<TextOrNumber>,
    /// `allow` (default) or `skip`.
    overlap: Option<String>,
    /// RFC 3339 with any offset, or epoch milliseconds.
    start_at: Option<TextOrNumber>,
    /// RFC 3339 with any offset, or epoch milliseconds; after `start_at`.
    end_at: Option<TextOrNumber>,
}

/// A field given as a string or as a non-negative integer.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum TextOrNumber {
    /// As text.
    Text(String),
    /// As a non-negative integer.
    Number(u64),
}

/// The body as a [`RawSpec`]. A field of the wrong type is refused naming the field and the
/// value (serde alone would only say "invalid type"), an unknown field naming it.
fn raw_spec(mut body: Value) -> Result<RawSpec, ApiError> {
    let Value::Object(fields) = &mut body else {
        return Err(ApiError::bad_request(format!(
            "invalid body: expected a JSON object with the spec's fields, got {body}"
        )));
    };
    for (key, value) in fields.iter_mut() {
        let Some(field) = TEXT_FIELDS.iter().find(|field| **field == key.as_str()) else {
            continue;
        };
        let numeric = NUMERIC.contains(field);
        if numeric {
            // `5.0` is an integer as JSON Schema counts.
            if let Some(whole) = super::tasks::whole_number(value) {
                *value = Value::from(whole);
            }
        }
        if value.is_null() {
            let error = SpecError::new(
                field,
                "null",
                "null is not a value; leave the field out instead",
            );
            return Err(ApiError::bad_request(error.to_string()));
        }
        let fits = value.is_string() || (numeric && value.is_u64());
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
#[utoipa::path(put, path = "/recurring/{name}", tag = "recurring", operation_id = "set_recurring", params(("name" = String, Path, description = "The schedule's name")),
    request_body(content = RecurringBody, description = "The spec, as the flags of `delayq recurring set`"),
    responses((status = 200, description = "{\"name\",\"queue\",\"next_ms\",\"result\":\"created|updated|unchanged\"}", body = Object), BadRequest, TooLarge, Unavailable))]
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
#[utoipa::path(get, path = "/recurring", tag = "recurring", operation_id = "list_recurring",
    responses((status = 200, description = "Every schedule, sorted by name, as `delayq recurring list --json`", body = Vec<Object>), Unavailable))]
pub(crate) async fn list(state: State) -> Result<Json<Value>, ApiError> {
    let schedules = state.scheduler.list_recurring().await?;
    Ok(Json(Value::Array(
        schedules.iter().map(json::recurring).collect(),
    )))
}

/// One schedule, or 404.
#[utoipa::path(get, path = "/recurring/{name}", tag = "recurring", operation_id = "get_recurring", params(("name" = String, Path, description = "The schedule's name")),
    responses((status = 200, description = "The schedule as `delayq recurring get --json`", body = Object), BadRequest, NotFound, Unavailable))]
pub(crate) async fn get(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let schedule = state.scheduler.recurring(&name).await?;
    found(&name, schedule)
}

/// Deletes the schedule and cancels its pending tick: `{"name","deleted":true}`, or 404.
#[utoipa::path(delete, path = "/recurring/{name}", tag = "recurring", operation_id = "delete_recurring", params(("name" = String, Path, description = "The schedule's name")),
    responses((status = 200, description = "{\"name\",\"deleted\":true}", body = Object), BadRequest, NotFound, Unavailable))]
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
#[utoipa::path(post, path = "/recurring/{name}/pause", tag = "recurring", operation_id = "pause_recurring", params(("name" = String, Path, description = "The schedule's name")),
    responses((status = 200, description = "The schedule, \"paused\": true", body = Object), BadRequest, NotFound, Unavailable))]
pub(crate) async fn pause(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let schedule = state.scheduler.pause_recurring(&name).await?;
    found(&name, schedule)
}

/// Resumes the schedule with its first tick after now; answers with it, or 404.
#[utoipa::path(post, path = "/recurring/{name}/resume", tag = "recurring", operation_id = "resume_recurring", params(("name" = String, Path, description = "The schedule's name")),
    responses((status = 200, description = "The schedule, \"paused\": false", body = Object), BadRequest, NotFound, Unavailable))]
pub(crate) async fn resume(
    state: State,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    schedule_name(&name)?;
    let schedule = state.scheduler.resume_recurring(&name).await?;
    found(&name, schedule)
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    use utoipa::PartialSchema;

    use super::*;

    #[test]
    fn the_documented_recurring_body_has_the_fields_of_the_spec() {
        let RefOr::T(Schema::Object(object)) = RecurringBody::schema() else {
            panic!("RecurringBody is an object schema");
        };
        let mut documented: Vec<&str> = object.properties.keys().map(String::as_str).collect();
        let mut spec = TEXT_FIELDS.to_vec();
        documented.sort_unstable();
        spec.sort_unstable();
        assert_eq!(documented, spec);
        for field in TEXT_FIELDS {
            let body = json!({ field: "x" });
            let refused = raw_spec(body).err().map(|error| error.message);
            assert!(
                !refused.unwrap_or_default().contains("unknown field"),
                "{field} is a field of RawSpec"
            );
        }
    }
}
