//! `delayq serve` (the HTTP API, dashboard and /metrics without joining the cluster), and
//! the HTTP server that `delayq node --listen` runs beside its work.

use std::net::SocketAddr;

use delayq_engine::config::Config;
use delayq_engine::Scheduler;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::{CliError, CliResult};
use super::node::Signals;
use super::{close, producer};

/// Where `delayq serve` listens when neither `--listen` nor `http.listen` says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// Examples shown by `delayq serve --help`.
pub const SERVE_EXAMPLES: &str = "\
Examples:
  delayq serve                              # http://127.0.0.1:7070/ (dashboard), /v1, /metrics
  delayq serve --listen 0.0.0.0:7070        # reachable from other machines: set a token
  DELAYQ_HTTP_TOKEN=s3cret delayq serve     # /v1 then needs Authorization: Bearer s3cret

Endpoints: PUT|GET|DELETE /v1/queues/{queue}/tasks/{id}, POST /v1/queues/{queue}/tasks,
GET /v1/queues, GET /v1/queues/{queue}/pending|dead, POST /v1/queues/{queue}/dead[/{id}]/retry,
DELETE /v1/queues/{queue}/dead[/{id}], GET /v1/nodes, /healthz, /readyz, /metrics, /.
Configuration: http.listen, http.token, http.read_only, http.allowed_hosts, http.header_timeout,
http.request_timeout, http.max_connections (or DELAYQ_HTTP_LISTEN, DELAYQ_HTTP_TOKEN).";

/// The arguments of `delayq serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on [default: http.listen, else 127.0.0.1:7070].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

/// Serves the API until SIGINT/SIGTERM, as a producer that never joins the cluster.
pub async fn run(args: ServeArgs, config: Config) -> CliResult<()> {
    let addr = match args.listen {
        Some(addr) => addr,
        None => listen_from_config(&config)?.unwrap_or(
            DEFAULT_LISTEN
                .parse()
                .map_err(|_| CliError::Runtime("bad built-in listen address".to_owned()))?,
        ),
    };
    let mut signals = Signals::new()?;
    let scheduler = tokio::select! {
        started = producer(config) => started?,
        name = signals.next() => return Err(CliError::Interrupted(format!("{name} while starting: exiting at once"))),
    };
    // An API tier declares the configured recurring schedules too (an unchanged one moves
    // nothing); the nodes drive them.
    if let Err(error) = scheduler.declare_configured_recurring().await {
        close(scheduler).await;
        return Err(error.into());
    }
    let server = match HttpServer::start(&scheduler, addr).await {
        Ok(server) => server,
        Err(error) => {
            close(scheduler).await;
            return Err(error);
        }
    };
    let name = signals.next().await;
    tracing::info!(signal = name, "stopping the HTTP server");
    server.stop().await;
    close(scheduler).await;
    Ok(())
}

/// `http.listen` of the configuration, parsed (a bad one is a usage error).
pub fn listen_from_config(config: &Config) -> CliResult<Option<SocketAddr>> {
    config
        .http
        .listen_addr()
        .map_err(|error| CliError::Usage(error.to_string()))
}

/// The HTTP server of a `serve` or a `node`, running on its own task.
pub struct HttpServer {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Binds `addr` and serves the router for `scheduler` (with a Prometheus recorder for
    /// /metrics); logs `url=http://ADDR/` once it listens.
    pub async fn start(scheduler: &Scheduler, addr: SocketAddr) -> CliResult<Self> {
        let mut options = delayq_http::HttpOptions::from_config(scheduler.config());
        options.metrics = Some(
            delayq_http::install_prometheus()
                .map_err(|error| CliError::Runtime(error.to_string()))?,
        );
        if options.token.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the HTTP API listens beyond this machine without a token: set http.token or DELAYQ_HTTP_TOKEN");
        }
        let read_only = options.read_only;
        let token = options.token.is_some();
        let listener = delayq_http::bind(addr)
            .map_err(|error| CliError::Runtime(format!("cannot listen on {addr}: {error}")))?;
        let bound = listener
            .local_addr()
            .map_err(|error| CliError::Runtime(format!("cannot listen on {addr}: {error}")))?;
        // A request's Host must name this address, loopback or http.allowed_hosts.
        options.listen = Some(bound);
        let app = delayq_http::router(scheduler.clone(), options);
        let limits = within_open_files(delayq_http::ServeLimits::from_config(
            &scheduler.config().http,
        ));
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            delayq_http::serve(listener, app, limits, async move {
                shutdown.cancelled().await;
            })
            .await;
        });
        tracing::info!(
            addr = %bound,
            url = %format!("http://{bound}/"),
            token,
            read_only,
            header_timeout_ms = limits.header_timeout.as_millis() as u64,
            request_timeout_ms = limits.request_timeout.as_millis() as u64,
            max_connections = limits.max_connections,
            "HTTP API, dashboard and /metrics listening"
        );
        Ok(HttpServer { stop, task })
    }

    /// Stops accepting, lets requests in progress finish (for up to 5 s), and returns.
    pub async fn stop(self) {
        self.stop.cancel();
        let mut task = self.task;
        if tokio::time::timeout(std::time::Duration::from_secs(5), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// `limits` with `max_connections` kept to half of the process's open-files limit (the soft
/// `RLIMIT_NOFILE`, `ulimit -n`): the other half stays for the node's own work (Redis
/// connections, handler processes and their pipes, files), so no number of HTTP clients can
/// starve it. Logs a warning when it lowers the configured value.
fn within_open_files(mut limits: delayq_http::ServeLimits) -> delayq_http::ServeLimits {
    let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let Some(open_files) = open_files else {
        return limits; // Unlimited.
    };
    let cap = usize::try_from(open_files / 2).unwrap_or(usize::MAX).max(1);
    if limits.max_connections > cap {
        tracing::warn!(
            configured = limits.max_connections,
            max_connections = cap,
            open_files_limit = open_files,
            "http.max_connections lowered to half of the open-files limit (raise ulimit -n to serve more connections)"
        );
        limits.max_connections = cap;
    }
    limits
}
