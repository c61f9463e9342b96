//! The cluster and this process: live nodes, liveness and readiness.

use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::{json, State};

/// The live nodes as `delayq nodes --json`.
pub(crate) async fn nodes(state: State) -> Result<Json<Value>, ApiError> {
    let nodes = state.scheduler.nodes().await?;
    Ok(Json(json::nodes(&nodes)))
}

/// The process is up.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Redis answers and, for a node, it has joined the cluster; else 503 saying which.
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
