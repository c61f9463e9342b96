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

/// `GET /`: the page. Every URL it uses (script, style sheet, `v1/...`) is relative, and so
/// is its `<base>` ([`base_href`]): the browser resolves them against the address it shows,
/// so the page works behind a reverse proxy that strips a path prefix (`/delayq/` -> `/`) as
/// well as nested in a larger router. It also tells the script whether changes are refused
/// (read-only: no retry or purge buttons) and whether this process fires tasks (only then
/// does it have a lateness to show).
#[utoipa::path(get, path = "/", tag = "dashboard", operation_id = "dashboard_page",
    responses((status = 200, description = "The dashboard page", body = String, content_type = "text/html")))]
pub(crate) async fn index(state: State, OriginalUri(uri): OriginalUri) -> Response {
    let base = base_href(uri.path())
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

/// The page's `<base href>` for a request of `path` (as this server saw it): relative to the
/// address in the browser, never absolute, since a proxy in front may have stripped a prefix
/// the browser still shows. A path ending in `/` (`/`, what a proxy makes of `/delayq/`) is
/// its own base, `./`. Without the slash (axum routes `/delayq`, not `/delayq/`, to a router
/// nested at `/delayq`) the base is the last segment as a directory, `./delayq/`, so
/// `v1/queues` goes to `/delayq/v1/queues`. (`./` first: a segment with a `:` is not read
/// as a scheme.) A proxy that maps `/delayq` without the slash to `/` must redirect to
/// `/delayq/` first, as nginx does for `location /delayq/`.
fn base_href(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((_, "")) | None => "./".to_owned(),
        Some((_, last)) => format!("./{last}/"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_relative_to_the_address_the_browser_shows() {
        for (path, base) in [
            ("/", "./"),
            ("/delayq/", "./"),
            ("/delayq", "./delayq/"),
            ("/apps/delayq", "./delayq/"),
            ("/a:b", "./a:b/"),
            ("", "./"),
        ] {
            assert_eq!(base_href(path), base, "{path:?}");
        }
    }

    /// What would make the browser leave a path prefix a proxy added: an absolute path in a
    /// fetch, a link, an asset or a style sheet's `url()`.
    #[test]
    fn the_page_uses_no_absolute_path() {
        let absolute = [
            "fetch('/",
            "fetch(\"/",
            "fetch(`/",
            "'/v1",
            "\"/v1",
            "`/v1",
            "'/assets",
            "\"/assets",
            "`/assets",
            "href=\"/",
            "href='/",
            "src=\"/",
            "src='/",
            "action=\"/",
            "url(/",
            "url(\"/",
            "url('/",
            "location.href = \"/",
            "location.href = '/",
        ];
        for (name, text) in [
            ("index.html", INDEX),
            ("app.js", SCRIPT),
            ("style.css", STYLE),
        ] {
            for needle in absolute {
                assert!(!text.contains(needle), "{name} contains {needle}");
            }
        }
        assert!(INDEX.contains(r#"<base href="{{BASE}}">"#));
        assert!(INDEX.contains(r#"<script src="assets/app.js">"#));
        assert!(INDEX.contains(r#"href="assets/style.css""#));
        assert!(SCRIPT.contains(r#""v1/queues""#));
    }
}
