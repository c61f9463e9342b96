//! The guard in front of `/v1`: the bearer token (compared in constant time) and the
//! read-only mode.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::AppState;

/// 401 without the right token, 403 for a change in read-only mode, else the route.
pub(crate) async fn guard(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &state.options.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(given) = given else {
            return unauthorized("missing token: send Authorization: Bearer <token>");
        };
        if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            return unauthorized("wrong token");
        }
    }
    let changes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if state.options.read_only && changes {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "read-only: {} {} is refused (http.read_only is set)",
                request.method(),
                request.uri().path()
            ),
        )
        .into_response();
    }
    next.run(request).await
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"delayq\""),
    );
    response
}
