//! The dashboard: one page, a script and a style sheet, embedded in the binary (no build
//! step, no Node toolchain). The page reads the same `/v1` API as everyone else.

use axum::extract::{OriginalUri, Path};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

use crate::error::ApiError;
use crate::State;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/style.css");

/// `GET /`: the page. Its `<base>` is the path it was asked for (with a trailing slash), so
/// its relative requests work wherever the router is mounted (`/`, `/delayq`, ...; axum
/// routes `/delayq`, not `/delayq/`, to a router nested at `/delayq`). It also
/// tells the script whether changes are refused (read-only: no retry or purge buttons) and
/// whether this process fires tasks (only then does it have a lateness to show).
#[utoipa::path(get, path = "/", tag = "dashboard", operation_id = "dashboard",
    responses((status = 200, description = "The dashboard page", body = String, content_type = "text/html")))]
pub(crate) async fn index(state: State, OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    let base = if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    };
    let base = base
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    (
        [(header::CACHE_CONTROL, "no-cache")],
        Html(
            INDEX
                .replace("{{READ_ONLY}}", bool_text(state.options.read_only))
                .replace("{{FIRES}}", bool_text(state.scheduler.runs_handlers()))
                // Last, so nothing in the request's path is taken for a placeholder.
                .replace("{{BASE}}", &base),
        ),
    )
        .into_response()
}

fn bool_text(value: bool) -> &'static str {
    if value {
        "true"
    } else {
        "false"
    }
}

/// `GET /assets/{file}`: the script and the style sheet.
#[utoipa::path(get, path = "/assets/{file}", tag = "dashboard", operation_id = "dashboard_asset",
    params(("file" = String, Path, description = "app.js or style.css")),
    responses((status = 200, description = "The script or the style sheet", body = String, content_type = "text/javascript"), crate::openapi::NotFound))]
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    let (body, content_type) = match file.as_str() {
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return ApiError::not_found(format!("no such asset: {file}")).into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
