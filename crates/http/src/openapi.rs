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
//! What the guard in front of `/v1` does is documented here, once, rather than on every
//! handler: each `/v1` operation gets the bearer security requirement and the 401 answer,
//! and each change (any method but GET) the 403 answer (read-only mode, cross-site request).
//!
//! The document itself sits under `/v1`, so with `http.token` set it needs the token like the
//! rest of `/v1`: it is read-only metadata, but one rule for all of `/v1` ("the token guards
//! `/v1`") is simpler to operate and audit than exceptions, and a client generator that can
//! call the API has the token anyway. `/healthz`, `/readyz`, `/metrics` and the dashboard's
//! page and assets stay open, and their operations carry an empty security requirement.

use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::IntoResponses;
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

/// 401: the token is missing or wrong (only when `http.token` is set).
#[derive(utoipa::IntoResponses)]
#[response(
    status = 401,
    description = "The bearer token is missing or wrong (only when http.token is set)"
)]
#[allow(dead_code)]
pub(crate) struct Unauthorized(ErrorBody);

/// 403: a change refused in read-only mode or sent by a browser from another site.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 403,
    description = "A change refused: http.read_only is set, or a browser sent it from another site (Sec-Fetch-Site)"
)]
#[allow(dead_code)]
pub(crate) struct Forbidden(ErrorBody);

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
        (name = "queues", description = "Queue counts, upcoming tasks, pause and resume"),
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

/// Adds what the guard in front of `/v1` does to every `/v1` operation (the bearer
/// requirement, 401, and 403 for changes), an empty security requirement to the open
/// routes, and the bearer scheme itself.
pub(crate) fn finish(mut document: OpenApi) -> OpenApi {
    let components = document.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER_SCHEME,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "Authorization: Bearer <http.token>; required on /v1 when http.token is set",
                ))
                .build(),
        ),
    );
    for (path, item) in document.paths.paths.iter_mut() {
        let guarded = path.starts_with("/v1/");
        for (method, operation) in operations_mut(item) {
            if !guarded {
                // An empty list: no security requirement at all.
                operation.security = Some(Vec::new());
                continue;
            }
            operation.security = Some(vec![SecurityRequirement::new(
                BEARER_SCHEME,
                Vec::<String>::new(),
            )]);
            operation
                .responses
                .responses
                .extend(Unauthorized::responses());
            if method != "get" {
                operation.responses.responses.extend(Forbidden::responses());
            }
        }
    }
    document
}

/// The operations of a path item, with their method in lower case.
pub(crate) fn operations_mut(item: &mut PathItem) -> Vec<(&'static str, &mut Operation)> {
    [
        ("get", &mut item.get),
        ("put", &mut item.put),
        ("post", &mut item.post),
        ("delete", &mut item.delete),
        ("patch", &mut item.patch),
        ("head", &mut item.head),
        ("options", &mut item.options),
        ("trace", &mut item.trace),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.as_mut().map(|operation| (method, operation)))
    .collect()
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
