//! The guard in front of `/v1`: the bearer token (compared in constant time), changes
//! refused when a browser says they come from another site, and the read-only mode.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::AppState;

/// 401 without the right token, 403 for a change a browser sent from another site or in
/// read-only mode, else the route.
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
            .and_then(bearer_token);
        let Some(given) = given else {
            return unauthorized("missing token: send Authorization: Bearer <token>");
        };
        if !token_matches(given.as_bytes(), token.as_bytes()) {
            return unauthorized("wrong token");
        }
    }
    let changes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    // A page on another site can make a browser send a "simple" POST (no preflight) to
    // a delayq on localhost that has no token; browsers say where a request comes from.
    let fetch_site = request
        .headers()
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok());
    if changes && fetch_site.is_some_and(|site| site != "same-origin" && site != "none") {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "cross-site request refused: {} {} came from another site (Sec-Fetch-Site: {})",
                request.method(),
                request.uri().path(),
                fetch_site.unwrap_or_default()
            ),
        )
        .into_response();
    }
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

/// The token of an `Authorization: Bearer <token>` header (the scheme's case does not
/// matter, RFC 9110).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|token| !token.is_empty())
}

/// Whether `given` is `token`, in a time that depends on the token's length only: `given`
/// is cut or padded to that length before the constant-time compare, so neither its bytes
/// nor its length tell an attacker how close it came.
fn token_matches(given: &[u8], token: &[u8]) -> bool {
    let mut padded = vec![0u8; token.len()];
    let common = given.len().min(token.len());
    padded[..common].copy_from_slice(&given[..common]);
    let same_length = (given.len() as u64).ct_eq(&(token.len() as u64));
    bool::from(padded.as_slice().ct_eq(token) & same_length)
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"delayq\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches(b"s3cret", b"s3cret"));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"s3creT", b"s3cret\0", b"x"] {
            assert!(!token_matches(wrong, b"s3cret"), "{wrong:?}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("abc"), None);
    }
}
