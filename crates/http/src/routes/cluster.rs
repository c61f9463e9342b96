//! The cluster and this process: live nodes, liveness and readiness.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::openapi::Unavailable;
use crate::{json, AppState, State};

/// The header every `/v1` answer carries: the cluster clock (milliseconds since the epoch)
/// when it was sent, so a client whose own clock is off (the dashboard's browser) still
/// shows "due in" and "ago" right.
pub const CLUSTER_NOW_HEADER: HeaderName = HeaderName::from_static("x-delayq-now-ms");

/// Adds [`CLUSTER_NOW_HEADER`] to the answer.
pub(crate) async fn stamp_cluster_time(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    response.headers_mut().insert(
        CLUSTER_NOW_HEADER,
        HeaderValue::from(state.scheduler.now_ms()),
    );
    response
}

/// The live nodes as `delayq nodes --json`.
#[utoipa::path(get, path = "/nodes", tag = "cluster", operation_id = "list_nodes",
    responses((status = 200, description = "The live nodes and the partitions they own, as `delayq nodes --json`", body = Vec<Object>), Unavailable))]
pub(crate) async fn nodes(state: State) -> Result<Json<Value>, ApiError> {
    let nodes = state.scheduler.nodes().await?;
    Ok(Json(json::nodes(&nodes)))
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "cluster", operation_id = "health",
    responses((status = 200, description = "{\"status\":\"ok\"}", body = Object)))]
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Redis answers and, for a node, it has joined the cluster; else 503 saying which.
#[utoipa::path(get, path = "/readyz", tag = "cluster", operation_id = "readiness",
    responses(
        (status = 200, description = "{\"ready\":true,\"redis\",\"member\",\"joined\"}", body = Object),
        (status = 503, description = "Not ready: {\"ready\":false,\"redis\",\"member\",\"joined\",\"error\"}", body = Object)))]
pub(crate) async fn readyz(state: State) -> (StatusCode, Json<Value>) {
    let readiness = state.scheduler.readiness().await;
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({
        "ready": readiness.is_ready(),
        "redis": readiness.store_error.is_none(),
        "member": readiness.member,
        "joined": readiness.joined,
    });
    if let Some(error) = readiness.store_error {
        body["error"] = Value::from(crate::error::redact_urls(&error));
    } else if readiness.member && !readiness.joined {
        body["error"] = Value::from("not a member of the cluster (yet)");
    }
    (status, Json(body))
}
