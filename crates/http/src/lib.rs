//! # delayq-http
//!
//! The HTTP API, Prometheus `/metrics` and the web dashboard of delayq, as an
//! [`axum::Router`]: `delayq serve` and `delayq node --listen` serve it, and a service that
//! embeds a [`Scheduler`] can mount it beside its own routes.
//!
//! ```no_run
//! use delayq_engine::{config::Config, Scheduler};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::load_or_default(None)?;
//! let scheduler = Scheduler::builder(config).start().await?;
//! let mut options = delayq_http::HttpOptions::from_config(scheduler.config());
//! // The limits of http.header_timeout, http.request_timeout and http.max_connections.
//! let limits = delayq_http::ServeLimits::from_config(&scheduler.config().http);
//! // Optional: a Prometheus recorder for /metrics (skip it if the service has its own).
//! options.metrics = Some(delayq_http::install_prometheus()?);
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "my service" }))
//!     // The dashboard is then at /delayq, the API at /delayq/v1/...
//!     .nest("/delayq", delayq_http::router(scheduler, options));
//! let listener = delayq_http::bind("127.0.0.1:7070".parse()?)?;
//! // Like axum::serve, with limits on slow and idle clients (see [`serve`]).
//! delayq_http::serve(listener, app, limits, std::future::pending()).await;
//! # Ok(()) }
//! ```
//!
//! Endpoints (JSON in and out, the same objects as the command line's `--json`; errors are
//! `{"error": "..."}` with 400, 401, 403, 404, 409, 413 or 503):
//!
//! ```text
//! PUT    /v1/queues/{queue}/tasks/{id}        {"delay_ms":N} | {"due_ms":N} | {"in":"30s"} | {"at":"RFC3339"}, optional "payload"
//! POST   /v1/queues/{queue}/tasks             [{"id":..,"delay_ms":..,"payload":..}, ...]
//! GET    /v1/queues/{queue}/tasks/{id}        the task, 404 when unknown
//! DELETE /v1/queues/{queue}/tasks/{id}        cancel
//! GET    /v1/queues                           per-queue counts
//! GET    /v1/queues/{queue}/pending?limit=N   the next N pending tasks, payloads as previews
//! POST   /v1/queues/{queue}/pause             POST /v1/queues/{queue}/resume (guarantee 11)
//! DELETE /v1/queues/{queue}[?force=true]      the queue and every key of it: {"queue","deleted":true,"tasks":N};
//!                                             409 with the counts while it holds tasks and force is not given
//! GET    /v1/queues/{queue}/dead?limit=N      dead letters, payloads as previews
//! POST   /v1/queues/{queue}/dead/{id}/retry   POST /v1/queues/{queue}/dead/retry retries all
//! DELETE /v1/queues/{queue}/dead/{id}         DELETE /v1/queues/{queue}/dead purges all
//! GET    /v1/nodes                            live nodes and the partitions they own
//! PUT    /v1/recurring/{name}                 {"queue","cron"|"every","tz","payload","misfire","misfire_grace","max_catchup","overlap","start_at","end_at"}
//! GET    /v1/recurring                        every recurring schedule; GET|DELETE /v1/recurring/{name}
//! POST   /v1/recurring/{name}/pause           POST /v1/recurring/{name}/resume
//! GET    /v1/lateness                         {"<queue>":{"count","p50_ms","p99_ms"}} fired by this process
//! GET    /v1/openapi.json                     the OpenAPI 3.1 document of every route (behind the token like all of /v1)
//! GET    /healthz  /readyz  /metrics  /
//! ```
//!
//! The document is exact: it gives the patterns and lengths of queue names, task ids and
//! schedule names, the bounds of every number (`due_ms` at least 10^11: a smaller number
//! looks like seconds and is refused, as the CLI's `--at` refuses it), the fields each body
//! takes (`additionalProperties: false`; a field is given or left out, `null` is refused),
//! every status each route answers with its error body, the bearer requirement only when
//! `http.token` is set, and links from an answer to the routes it names. A bulk body with a
//! malformed item is refused whole (400 naming the item's index); an item the store refuses
//! (a payload over `max_payload`) fails alone in `errors`. Schemathesis checks the server
//! against it (crates/http/tests/schemathesis.rs).
//!
//! The lists take `limit` in 1..=1,000 (default 20; else 400), read at most `limit` records
//! from Redis overall, and show each payload cut to its first
//! [`json::PAYLOAD_PREVIEW_BYTES`] bytes with `payload_bytes` and `payload_truncated`
//! ([`json::insert_payload_preview`]); `GET` of the task shows the whole payload.
//!
//! With a token, `/v1` needs `Authorization: Bearer <token>` (compared in constant time);
//! `/healthz`, `/readyz`, `/metrics` and the dashboard page stay open (the page asks for the
//! token and sends it as a header: no cookies, so no cross-site request forgery). A change a
//! browser sends from another site (`Sec-Fetch-Site: cross-site` or `same-site`) is refused
//! with 403 even without a token, so a web page cannot drive a delayq on localhost.

#![warn(missing_docs)]

mod auth;
mod dashboard;
mod error;
pub mod json;
mod openapi;
mod prometheus;
mod routes;
mod schemas;
mod server;
pub mod time;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use delayq_engine::config::Config;
use delayq_engine::Scheduler;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::{redact_urls, ApiError, HttpError};
pub use metrics_exporter_prometheus::PrometheusHandle;
pub use openapi::BEARER_SCHEME;
pub use prometheus::{
    install_prometheus, prometheus_builder, DURATION_BUCKETS, LATENESS_BUCKETS, METRIC_NAMES,
};
pub use routes::cluster::CLUSTER_NOW_HEADER;
pub use server::{
    bind, serve, ServeLimits, ACCEPT_ERROR_BACKOFF, ACCEPT_ERROR_LOG_PERIOD, LISTEN_BACKLOG,
};

/// Room for the JSON around the payloads of a body (keys, ids, a bulk list).
pub const BODY_SLACK: usize = 64 * 1024;

/// The most bytes one payload byte takes in a JSON string (`\u00XX` for a control byte; a
/// 3-byte CJK character written as `\uXXXX` takes 6 bytes for 3): a body may carry a payload
/// of `max_payload` decoded bytes however its client escaped it. `max_payload` bounds the
/// decoded payload (413 naming it), the body limit only the transport.
pub const JSON_ESCAPE_FACTOR: usize = 6;

/// The body limit for `max_payload`: [`JSON_ESCAPE_FACTOR`] × `max_payload` + [`BODY_SLACK`].
pub fn body_limit_for(max_payload: usize) -> usize {
    max_payload
        .saturating_mul(JSON_ESCAPE_FACTOR)
        .saturating_add(BODY_SLACK)
}

/// How the router behaves: token, read-only mode, limits and metrics.
#[derive(Clone)]
pub struct HttpOptions {
    /// The bearer token `/v1` requires; `None`: open.
    pub token: Option<String>,
    /// Refuse every change with 403.
    pub read_only: bool,
    /// Largest request body: [`body_limit_for`] `engine.max_payload`. Larger is 413; the
    /// decoded payload itself is bounded by `max_payload`.
    pub body_limit: usize,
    /// The Prometheus recorder's handle `/metrics` renders; `None`: `/metrics` answers 404
    /// (the embedding service exports metrics its own way).
    pub metrics: Option<PrometheusHandle>,
    /// How long the queue counts behind `delayq_queue_tasks` are reused between scrapes, so
    /// scrapes never cost one Redis scan each.
    pub queue_stats_ttl: Duration,
    /// The address the server listens on, when known (`delayq serve`, `delayq node
    /// --listen`): a request may name it in `Host`. `None` (a router mounted in another
    /// application) accepts any IP literal.
    pub listen: Option<std::net::SocketAddr>,
    /// Host names accepted besides the listen address and loopback (`http.allowed_hosts`).
    pub allowed_hosts: Vec<String>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("read_only", &self.read_only)
            .field("body_limit", &self.body_limit)
            .field("metrics", &self.metrics.is_some())
            .field("queue_stats_ttl", &self.queue_stats_ttl)
            .field("listen", &self.listen)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

impl HttpOptions {
    /// The options of `config`'s `http:` section, the body limit from `engine.max_payload`,
    /// no metrics handle yet.
    pub fn from_config(config: &Config) -> Self {
        HttpOptions {
            // A token from a file or the environment (a Kubernetes secret written with
            // `echo`) often ends in a newline: surrounding whitespace is never part of it.
            token: config
                .http
                .token
                .as_deref()
                .map(|token| token.trim().to_owned()),
            listen: None,
            allowed_hosts: config.http.allowed_hosts.clone(),
            read_only: config.http.read_only,
            body_limit: body_limit_for(config.engine.max_payload),
            metrics: None,
            queue_stats_ttl: Duration::from_secs(5),
        }
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) scheduler: Scheduler,
    pub(crate) options: HttpOptions,
    pub(crate) gauges: prometheus::QueueGauges,
    /// The router's OpenAPI document as JSON, set once the router is built.
    pub(crate) openapi: OnceLock<bytes::Bytes>,
}

/// Shared state as the handlers extract it.
pub(crate) type State = axum::extract::State<Arc<AppState>>;

/// The API, `/metrics`, the health checks and the dashboard for `scheduler`, ready to be
/// served or nested under a path of a larger application.
///
/// Every route is registered through [`utoipa_axum::routes!`], which takes its path and
/// methods from the handler's `#[utoipa::path]` attribute: the same list builds the router
/// and `GET /v1/openapi.json`.
pub fn router(scheduler: Scheduler, options: HttpOptions) -> Router {
    let body_limit = options.body_limit;
    let state = Arc::new(AppState {
        scheduler,
        options,
        gauges: prometheus::QueueGauges::default(),
        openapi: OnceLock::new(),
    });
    let v1 = v1_routes()
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            routes::cluster::stamp_cluster_time,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ));
    let (router, document) = with_open_routes(v1).split_for_parts();
    let document = openapi::finish(document, state.options.token.is_some());
    // Serialising a document of plain strings and maps cannot fail; an empty answer would
    // show it if it ever did.
    let json = serde_json::to_vec_pretty(&document).unwrap_or_default();
    let _ = state.openapi.set(bytes::Bytes::from(json));
    router
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::host_guard,
        ))
        .with_state(state)
}

/// The `/v1` routes, each registered through [`utoipa_axum::routes!`] from its handler's
/// `#[utoipa::path]` attribute.
fn v1_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(routes::queues::stats))
        .routes(routes!(routes::tasks::schedule_many))
        .routes(routes!(
            routes::tasks::schedule,
            routes::tasks::get,
            routes::tasks::cancel
        ))
        .routes(routes!(routes::queues::pending))
        .routes(routes!(routes::queues::keys))
        .routes(routes!(routes::queues::delete))
        .routes(routes!(routes::queues::pause))
        .routes(routes!(routes::queues::resume))
        .routes(routes!(routes::queues::dead, routes::queues::purge_all))
        .routes(routes!(routes::queues::retry_all))
        .routes(routes!(routes::queues::purge_one))
        .routes(routes!(routes::queues::retry_one))
        .routes(routes!(routes::cluster::nodes))
        .routes(routes!(routes::recurring::list))
        .routes(routes!(
            routes::recurring::set,
            routes::recurring::get,
            routes::recurring::delete
        ))
        .routes(routes!(routes::recurring::pause))
        .routes(routes!(routes::recurring::resume))
        .routes(routes!(prometheus::lateness))
        .routes(routes!(openapi::document))
}

/// `v1` nested under `/v1` beside the open routes (health, readiness, metrics, dashboard).
fn with_open_routes(v1: OpenApiRouter<Arc<AppState>>) -> OpenApiRouter<Arc<AppState>> {
    openapi::base_router()
        .nest("/v1", v1)
        .routes(routes!(routes::cluster::healthz))
        .routes(routes!(routes::cluster::readyz))
        .routes(routes!(prometheus::render))
        .routes(routes!(dashboard::index))
        .routes(routes!(dashboard::asset))
}

/// The OpenAPI 3.1 document that `GET /v1/openapi.json` serves, without a scheduler: for
/// generating clients (`cargo run -p delayq-http --example openapi`, clients/generate.sh).
/// `token`: whether the server has `http.token` (the document then requires the bearer
/// token on `/v1`).
pub fn openapi_document(token: bool) -> serde_json::Value {
    let (_, document) = with_open_routes(v1_routes()).split_for_parts();
    openapi::finish(document, token)
}
