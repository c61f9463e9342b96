//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the router, generated from the
//! `#[utoipa::path]` attribute of each handler.
//!
//! The router and the document come from one list: [`crate::router`] registers every
//! handler through utoipa-axum's `routes!` on an `OpenApiRouter`, which takes each route's
//! path and methods from the handler's attribute and adds the same operation to the
//! document. A handler without an attribute cannot be registered that way, and the test
//! `every_route_of_the_router_is_in_the_document` (crates/http/tests/openapi.rs) compares the
//! routes the finished `axum::Router` serves with the document's operations, so a route
//! added beside the list fails it.
//!
//! What the guards do is documented here, once, rather than on every handler
//! ([`finish`]): every operation gets the Host guard's 421; with `http.token` set each `/v1`
//! operation gets the bearer security requirement and the 401 answer (without a token, no
//! requirement at all: the document states the server as configured); each change (any
//! method but GET) gets the 403 answer (read-only mode, cross-site request). The bodies'
//! and path parameters' schemas are the exact ones of [`crate::schemas`].
//!
//! The document itself sits under `/v1`, so with `http.token` set it needs the token like the
//! rest of `/v1`: it is read-only metadata, but one rule for all of `/v1` ("the token guards
//! `/v1`") is simpler to operate and audit than exceptions, and a client generator that can
//! call the API has the token anyway. `/healthz`, `/readyz`, `/metrics` and the dashboard's
//! page and assets stay open, and their operations carry an empty security requirement.

use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::error::ApiError;
use crate::{AppState, State};

/// The name of the bearer token's security scheme in the document.
pub const BEARER_SCHEME: &str = "bearer";

/// The error object every failed request answers with.
#[derive(utoipa::ToSchema)]
#[schema(example = json!({"error": "task \"o-1\" not found in queue \"orders\""}))]
#[allow(dead_code)] // Only its schema is used; errors are built by `ApiError`.
pub(crate) struct ErrorBody {
    /// What went wrong, one line, naming the value at fault.
    error: String,
}

/// 400: a bad queue name, task id, schedule name, time, query or body.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 400,
    description = "A bad queue name, task id, schedule name, time, query parameter or body"
)]
#[allow(dead_code)]
pub(crate) struct BadRequest(ErrorBody);

/// 404: no such task, dead letter, queue, schedule or endpoint.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 404,
    description = "No such task, dead letter, queue or recurring schedule"
)]
#[allow(dead_code)]
pub(crate) struct NotFound(ErrorBody);

/// 409: a queue deletion refused because the queue holds tasks (and `force` was not given).
#[derive(utoipa::IntoResponses)]
#[response(
    status = 409,
    description = "The queue holds pending, in-flight or dead tasks and force=true was not given: {\"error\",\"queue\",\"pending\",\"inflight\",\"dead\"}"
)]
#[allow(dead_code)]
pub(crate) struct Conflict(ErrorBody);

/// 413: the body or the payload is over `engine.max_payload`.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 413,
    description = "The request body exceeds six times engine.max_payload plus 64 KiB, or a payload exceeds engine.max_payload once decoded"
)]
#[allow(dead_code)]
pub(crate) struct TooLarge(ErrorBody);

/// 503: Redis is out of reach (or its replicas did not confirm a write in time).
#[derive(utoipa::IntoResponses)]
#[response(
    status = 503,
    description = "Redis is unreachable, or its replicas did not confirm a write in time"
)]
#[allow(dead_code)]
pub(crate) struct Unavailable(ErrorBody);

/// The parts of the document that are not operations: info, the error schema and the
/// bearer scheme.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "delayq",
        description = "The HTTP API of delayq, a clustered delayed-task scheduler. JSON in and out, the same objects as the command line's --json output; every error is {\"error\": \"...\"}. Paths are relative to where the router is mounted (/ for `delayq serve` and `delayq node --listen`).",
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "tasks", description = "Schedule, look up and cancel tasks"),
        (name = "queues", description = "Queue counts, upcoming tasks, flow keys holding tasks back, pause and resume"),
        (name = "dead letters", description = "Tasks out of attempts: list, retry, purge"),
        (name = "recurring", description = "Recurring schedules (cron or every)"),
        (name = "cluster", description = "Nodes, health, readiness and metrics"),
        (name = "dashboard", description = "The web dashboard"),
        (name = "meta", description = "This document"),
    ),
)]
struct Base;

/// A fresh document-carrying router holding only [`Base`], to register routes on.
pub(crate) fn base_router() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::with_openapi(<Base as utoipa::OpenApi>::openapi())
}

/// The document as served: the exact schemas of [`crate::schemas`] in place of the derived
/// ones, what the guards do on every operation (421 for a foreign `Host`; on `/v1` the bearer
/// requirement and 401 when `token` is set, and 403 for every change), and the links from
/// one operation's answer to the routes it names.
pub(crate) fn finish(document: OpenApi, token: bool) -> Value {
    let Ok(mut document) = serde_json::to_value(&document) else {
        return Value::Null;
    };
    let schemas = &mut document["components"]["schemas"];
    if let Value::Object(schemas) = schemas {
        // The derived helper of the old RecurringBody; the exact schemas replace it.
        schemas.remove("TextOrNumber");
        for (name, schema) in crate::schemas::components() {
            schemas.insert(name.to_owned(), schema);
        }
    }
    if token {
        document["components"]["securitySchemes"] = json!({
            BEARER_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "Authorization: Bearer <http.token>; this server has a token, so /v1 requires it",
            }
        });
    }
    if let Value::Object(paths) = &mut document["paths"] {
        for (path, item) in paths.iter_mut() {
            let Value::Object(item) = item else { continue };
            for (method, operation) in item.iter_mut() {
                finish_operation(path, method, operation, token);
            }
        }
    }
    document["paths"]["/v1/queues/{queue}/tasks"]["post"]["requestBody"]["content"]
        ["application/json"]["schema"] = crate::schemas::bulk_body();
    document
}

/// [`finish`] for one operation.
fn finish_operation(path: &str, method: &str, operation: &mut Value, token: bool) {
    // `get_mut`, not indexing: indexing a missing key would add it as null.
    if let Some(Value::Array(parameters)) = operation.get_mut("parameters") {
        for parameter in parameters {
            let name = parameter["name"].as_str().unwrap_or_default().to_owned();
            if parameter["in"] == "path" {
                if let Some(schema) = crate::schemas::path_parameter(path, &name) {
                    parameter["schema"] = schema;
                }
            }
        }
    }
    let responses = &mut operation["responses"];
    responses["421"] = error_response(
        "The Host header names neither this server's listen address, a loopback name or address, nor one of http.allowed_hosts",
    );
    let guarded = path.starts_with("/v1/");
    // An empty list: no security requirement at all.
    operation["security"] = json!([]);
    if guarded && token {
        operation["security"] = json!([{ BEARER_SCHEME: [] }]);
        operation["responses"]["401"] =
            error_response("The bearer token is missing or wrong (http.token is set)");
    }
    if guarded && method != "get" {
        operation["responses"]["403"] = error_response(
            "A change refused: http.read_only is set, or a browser sent it from another site (Sec-Fetch-Site)",
        );
    }
    let operation_id = operation["operationId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if let Some(schema) = crate::schemas::answer_of(&operation_id) {
        operation["responses"]["200"]["content"]["application/json"]["schema"] = schema;
    }
    if let Some(links) = links(&operation_id) {
        operation["responses"]["200"]["links"] = links;
    }
}

/// An error answer of the document: `ErrorBody` as JSON.
fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    })
}

/// The links of an operation's 200 answer: the routes its body names the parameters of.
fn links(operation_id: &str) -> Option<Value> {
    let task = json!({"queue": "$response.body#/queue", "id": "$response.body#/id"});
    let queue = json!({"queue": "$response.body#/queue"});
    let schedule = json!({"name": "$response.body#/name"});
    let to = |operation: &str, parameters: &Value, description: &str| json!({"operationId": operation, "parameters": parameters, "description": description});
    Some(match operation_id {
        "schedule_task" => json!({
            "GetTask": to("get_task", &task, "The task just scheduled"),
            "CancelTask": to("cancel_task", &task, "Cancel the task just scheduled"),
        }),
        "get_task" => json!({
            "CancelTask": to("cancel_task", &task, "Cancel this task"),
        }),
        "pause_queue" => json!({
            "ResumeQueue": to("resume_queue", &queue, "Resume the queue"),
            "ListPendingTasks": to("list_pending_tasks", &queue, "The queue's upcoming tasks"),
        }),
        "resume_queue" => json!({
            "PauseQueue": to("pause_queue", &queue, "Pause the queue again"),
        }),
        "set_recurring" => json!({
            "GetRecurring": to("get_recurring", &schedule, "The schedule just set"),
            "PauseRecurring": to("pause_recurring", &schedule, "Pause the schedule"),
            "DeleteRecurring": to("delete_recurring", &schedule, "Delete the schedule"),
        }),
        "pause_recurring" => json!({
            "ResumeRecurring": to("resume_recurring", &schedule, "Resume the schedule"),
        }),
        _ => return None,
    })
}

/// The document of this router as JSON.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    operation_id = "openapi_document",
    responses(
        (status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json", body = Object),
    )
)]
pub(crate) async fn document(state: State) -> Response {
    match state.openapi.get() {
        Some(json) => ([(header::CONTENT_TYPE, "application/json")], json.clone()).into_response(),
        None => ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "the OpenAPI document was not built",
        )
        .into_response(),
    }
}
