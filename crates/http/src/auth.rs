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
        let Some(header) = request.headers().get(header::AUTHORIZATION) else {
            return unauthorized("missing token: send Authorization: Bearer <token>");
        };
        // A header that is not visible ASCII cannot carry the token: a wrong one.
        let Some(given) = header.to_str().ok().and_then(bearer_token) else {
            return unauthorized("wrong token");
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

/// 421 for a request whose `Host` names neither the listen address, a loopback name or
/// address, nor one of `http.allowed_hosts` (DNS rebinding: a web page whose name now points
/// at 127.0.0.1 makes the browser send `Host: evil.example`). Every answer also carries
/// `X-Frame-Options: DENY` and `Content-Security-Policy: frame-ancestors 'none'`, so no page
/// can frame the dashboard.
pub(crate) async fn host_guard(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|value| value.to_str().unwrap_or("\u{fffd}").to_owned());
    let mut response = match host {
        Some(host) if !host_allowed(&host, &state.options) => ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not this server's: use its listen address or a loopback name, or list the name in http.allowed_hosts"
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    };
    let headers = response.headers_mut();
    headers.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("frame-ancestors 'none'"),
    );
    response
}

/// Whether `host` (a `Host` header: a name or an IP literal, with or without a port) may
/// reach this server.
pub(crate) fn host_allowed(host: &str, options: &crate::HttpOptions) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        rest.split(']').next().unwrap_or_default()
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|byte| byte.is_ascii_digit()) => name,
            _ => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Ok(ip) = name.parse::<std::net::IpAddr>() {
        // An IP literal cannot be rebound; it must be loopback or the address listened on
        // (any address when listening on all of them, or when the router is mounted).
        return ip.is_loopback()
            || match options.listen {
                Some(listen) if !listen.ip().is_unspecified() => ip == listen.ip(),
                _ => true,
            };
    }
    options.allowed_hosts.iter().any(|allowed| {
        allowed
            .trim()
            .trim_end_matches('.')
            .eq_ignore_ascii_case(&name)
    })
}

#[cfg(test)]
mod host_tests {
    use super::*;

    fn options(listen: Option<&str>, allowed: &[&str]) -> crate::HttpOptions {
        crate::HttpOptions {
            token: None,
            read_only: false,
            body_limit: 0,
            metrics: None,
            queue_stats_ttl: std::time::Duration::ZERO,
            listen: listen.map(|addr| addr.parse().expect("an address")),
            allowed_hosts: allowed.iter().map(|name| (*name).to_owned()).collect(),
        }
    }

    #[test]
    fn loopback_the_listen_address_and_allowed_names_pass_anything_else_does_not() {
        let local = options(Some("127.0.0.1:7070"), &["delayq.internal"]);
        for host in [
            "127.0.0.1:7070",
            "localhost:7070",
            "LOCALHOST",
            "app.localhost:80",
            "[::1]:7070",
            "127.0.0.2",
            "delayq.internal:7070",
            "Delayq.Internal.",
        ] {
            assert!(host_allowed(host, &local), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7070",
            "10.0.0.5:7070",
            "delayq.internal.evil",
        ] {
            assert!(!host_allowed(host, &local), "{host}");
        }
        let everywhere = options(Some("0.0.0.0:7070"), &[]);
        assert!(host_allowed("10.0.0.5:7070", &everywhere));
        assert!(!host_allowed("evil.example", &everywhere));
        let specific = options(Some("10.0.0.5:7070"), &[]);
        assert!(host_allowed("10.0.0.5:7070", &specific));
        assert!(!host_allowed("10.0.0.6:7070", &specific));
    }
}
