//! The accept loop that serves the router with limits on slow and idle clients.
//!
//! `axum::serve` keeps a connection for as long as the client holds it: a client that opens
//! sockets and sends nothing keeps every one of them, and once the process runs out of file
//! descriptors the node can no longer spawn handlers or reconnect to Redis. [`serve`] bounds
//! each connection instead:
//!
//! * a request's head (request line and headers) must arrive within
//!   [`ServeLimits::header_timeout`], and a kept-alive connection waiting for its next request
//!   is closed after the same time (hyper's `header_read_timeout` runs again after each
//!   answer);
//! * a request must be answered (its body read, the handler done) within
//!   [`ServeLimits::request_timeout`], else the answer is 503;
//! * at most [`ServeLimits::max_connections`] connections are served at once. The loop does
//!   not accept beyond it: further connections wait in the kernel's listen backlog, holding
//!   no file descriptor of the process, and are accepted as served ones close. [`bind`]
//!   listens with a backlog of [`LISTEN_BACKLOG`] (tokio's `TcpListener::bind` uses 128);
//!   beyond that too the kernel leaves new connections unanswered until there is room.
//!
//! An `accept` error (`EMFILE` when the process is out of descriptors, `ENOBUFS`, ...) does
//! not end the loop: it is logged at most once per [`ACCEPT_ERROR_LOG_PERIOD`] (with the count
//! of errors not logged) and the loop pauses [`ACCEPT_ERROR_BACKOFF`] before trying again,
//! instead of spinning on the error.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use delayq_engine::config::HttpConfig;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower_service::Service;

/// How long the accept loop pauses after an `accept` error such as `EMFILE`.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);
/// At most one log line per this period for a burst of `accept` errors.
pub const ACCEPT_ERROR_LOG_PERIOD: Duration = Duration::from_secs(10);

/// The listen backlog of [`bind`]: how many connections beyond
/// [`ServeLimits::max_connections`] the kernel holds (the system caps it at
/// `net.core.somaxconn`).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds `addr` for [`serve`]: `SO_REUSEADDR` (a restarted server rebinds at once) and a
/// backlog of [`LISTEN_BACKLOG`]. Call it within a tokio runtime.
///
/// # Errors
/// The socket's, e.g. the address is in use or not this machine's.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The limits [`serve`] holds every connection to (`http.header_timeout`,
/// `http.request_timeout`, `http.max_connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// How long a client may take to send a request's head, and how long a kept-alive
    /// connection may wait for its next request, before the connection is closed.
    pub header_timeout: Duration,
    /// How long a request may take to be answered (from its head received to the answer's
    /// head sent, the request body included); beyond it the answer is 503.
    pub request_timeout: Duration,
    /// Most connections served at once; more wait in the listen backlog (at least 1).
    pub max_connections: usize,
}

impl ServeLimits {
    /// The limits of an `http:` section.
    pub fn from_config(http: &HttpConfig) -> Self {
        ServeLimits {
            header_timeout: http.header_timeout,
            request_timeout: http.request_timeout,
            max_connections: http.max_connections,
        }
    }
}

impl Default for ServeLimits {
    /// The defaults of `http:` (10 s, 30 s, 512).
    fn default() -> Self {
        Self::from_config(&HttpConfig::default())
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes.
///
/// On shutdown it stops accepting, asks every open connection to close once its request in
/// progress is answered (idle ones close at once), and returns when all have closed. Bound
/// that wait from outside if needed: dropping the returned future (e.g. aborting its task)
/// drops every connection at once.
///
/// ```no_run
/// # async fn run(app: axum::Router) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7070").await?;
/// let stop = async { let _ = tokio::signal::ctrl_c().await; };
/// delayq_http::serve(listener, app, delayq_http::ServeLimits::default(), stop).await;
/// # Ok(()) }
/// ```
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut errors = AcceptErrors::default();
    tokio::pin!(shutdown);
    loop {
        reap(&mut connections);
        // Accept only with a free slot: beyond max_connections, clients wait in the backlog.
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else {
            break; // The semaphore is never closed.
        };
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    if is_connection_error(&error) {
                        continue;
                    }
                    errors.record(&error);
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_ERROR_BACKOFF) => continue,
                    }
                }
            },
        };
        errors.recovered();
        // Small answers: do not wait for Nagle. A failure only costs latency.
        let _ = stream.set_nodelay(true);
        let service = RequestTimeout {
            router: router.clone(),
            timeout: limits.request_timeout,
        };
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |request| service.clone().call(request)),
        );
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::debug!(
        connections = connections.len(),
        "HTTP server stopped accepting; closing its connections"
    );
    // Idle connections close now, busy ones after their answer.
    graceful.shutdown().await;
    while let Some(joined) = connections.join_next().await {
        report(joined);
    }
}

/// Collects the connection tasks that ended, so the set does not grow with every client.
fn reap(connections: &mut JoinSet<()>) {
    while let Some(joined) = connections.try_join_next() {
        report(joined);
    }
}

fn report(joined: Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined {
        if error.is_panic() {
            tracing::error!(%error, "an HTTP connection task panicked");
        }
    }
}

/// Errors of one connection that went away before it was accepted: the next accept may
/// succeed at once.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Rate-limited logging of `accept` errors: the first of a burst is logged, the rest are
/// counted and reported at most once per [`ACCEPT_ERROR_LOG_PERIOD`].
#[derive(Debug, Default)]
struct AcceptErrors {
    last_logged: Option<Instant>,
    not_logged: u64,
}

impl AcceptErrors {
    fn record(&mut self, error: &io::Error) {
        let now = Instant::now();
        if self
            .last_logged
            .is_some_and(|last| now.duration_since(last) < ACCEPT_ERROR_LOG_PERIOD)
        {
            self.not_logged += 1;
            return;
        }
        tracing::warn!(
            %error,
            not_logged = self.not_logged,
            backoff_ms = ACCEPT_ERROR_BACKOFF.as_millis() as u64,
            "the HTTP server cannot accept connections; retrying"
        );
        self.last_logged = Some(now);
        self.not_logged = 0;
    }

    /// An accept succeeded: the burst is over (its unlogged count is reported).
    fn recovered(&mut self) {
        if self.last_logged.take().is_some() && self.not_logged > 0 {
            tracing::info!(
                not_logged = self.not_logged,
                "the HTTP server accepts connections again"
            );
        }
        self.not_logged = 0;
    }
}

/// The router with every request bounded by `timeout`.
#[derive(Clone)]
struct RequestTimeout {
    router: Router,
    timeout: Duration,
}

impl RequestTimeout {
    async fn call(mut self, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        let answer = self.router.call(request.map(Body::new));
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(answered) => answered,
            Err(_) => Ok(timed_out(self.timeout)),
        }
    }
}

/// The 503 of a request not answered within `timeout`.
fn timed_out(timeout: Duration) -> Response<Body> {
    let body = serde_json::json!({
        "error": format!(
            "the request was not answered within http.request_timeout ({})",
            humantime::format_duration(timeout)
        )
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// A server of a router whose `/slow` answers after `delay`, with `limits`; returns its
    /// address, the shutdown trigger and the server's task.
    async fn start(
        limits: ServeLimits,
        delay: Duration,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let router = Router::new().route(
            "/slow",
            axum::routing::get(move || async move {
                tokio::time::sleep(delay).await;
                "done"
            }),
        );
        let listener = bind("127.0.0.1:0".parse().expect("an address")).expect("bind");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, router, limits, async move {
            let _ = stopped.await;
        }));
        (addr, stop, task)
    }

    /// Sends `GET path` and reads until the server closes the connection.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn a_slow_handler_is_answered_503_after_request_timeout() {
        let limits = ServeLimits {
            request_timeout: Duration::from_millis(200),
            ..ServeLimits::default()
        };
        let (addr, _stop, _task) = start(limits, Duration::from_secs(5)).await;
        let started = Instant::now();
        let answer = get(addr, "/slow").await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("http.request_timeout (200ms)"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn shutdown_finishes_requests_in_progress_and_closes_idle_connections() {
        let (addr, stop, task) = start(ServeLimits::default(), Duration::from_millis(500)).await;
        let mut idle = TcpStream::connect(addr).await.expect("connect");
        let busy = tokio::spawn(get(addr, "/slow"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = stop.send(());
        let answer = busy.await.expect("the busy client");
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("done"),
            "{answer}"
        );
        // The idle connection is closed without waiting for header_timeout (10 s).
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(3), idle.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        tokio::time::timeout(Duration::from_secs(3), task)
            .await
            .expect("serve returns once its connections closed")
            .expect("serve did not panic");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "no longer listening"
        );
    }

    #[test]
    fn limits_come_from_the_http_section() {
        let http = HttpConfig {
            header_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(3),
            max_connections: 4,
            ..HttpConfig::default()
        };
        assert_eq!(
            ServeLimits::from_config(&http),
            ServeLimits {
                header_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(3),
                max_connections: 4,
            }
        );
        assert_eq!(ServeLimits::default().max_connections, 512);
    }

    #[test]
    fn per_connection_accept_errors_are_retried_at_once() {
        assert!(is_connection_error(&io::Error::from(
            io::ErrorKind::ConnectionAborted
        )));
        // EMFILE: back off.
        assert!(!is_connection_error(&io::Error::from_raw_os_error(24)));
    }
}
