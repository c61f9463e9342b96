//! A fault proxy for the end-to-end tests: a TCP proxy on a free port in front of the test's
//! redis-server, on its own thread with its own runtime, driven by the (blocking) test code:
//!
//! - [`FaultProxy::pass`]: bytes flow both ways.
//! - [`FaultProxy::blackhole`]: silence, not resets. Every connection stays open and nothing is
//!   forwarded in either direction; new connections are accepted and get nothing either. The
//!   bytes are held, not dropped (as TCP retransmits across a healed partition): after `pass`
//!   the streams go on in order, or the client has given up on them and closes them.
//! - [`FaultProxy::reset`]: every connection is closed with a reset (linger 0), and new ones
//!   are accepted and reset at once.
//! - [`FaultProxy::delay`]: each chunk is held for the given time before it is forwarded
//!   (latency, not a bandwidth cap: chunks read while others wait are not delayed further).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxy does with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward.
    Pass,
    /// Forward nothing, keep connections open.
    Blackhole,
    /// Reset every connection, old and new.
    Reset,
    /// Forward each chunk this long after it was read.
    Delay(Duration),
}

/// A running proxy; stops (and drops its connections) when dropped.
pub struct FaultProxy {
    port: u16,
    mode: watch::Sender<Mode>,
    stop: watch::Sender<bool>,
    accepted: Arc<AtomicUsize>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `127.0.0.1:<upstream>`.
    pub fn start(upstream: u16) -> Self {
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let (stop, stop_rx) = watch::channel(false);
        let accepted = Arc::new(AtomicUsize::new(0));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let counter = accepted.clone();
        std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the fault proxy");
                runtime.block_on(async move {
                    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                    let port = listener.local_addr().expect("address").port();
                    port_tx.send(port).expect("the test waits for the port");
                    let mut stopping = stop_rx.clone();
                    loop {
                        tokio::select! {
                            _ = stopping.changed() => return,
                            accepted = listener.accept() => {
                                let Ok((client, _)) = accepted else { continue };
                                counter.fetch_add(1, Ordering::SeqCst);
                                tokio::spawn(link(client, upstream, mode_rx.clone(), stop_rx.clone()));
                            }
                        }
                    }
                });
            })
            .expect("spawn the fault proxy thread");
        let port = port_rx.recv().expect("the fault proxy's port");
        FaultProxy {
            port,
            mode,
            stop,
            accepted,
        }
    }

    /// `redis://127.0.0.1:<proxy port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Forwards everything.
    pub fn pass(&self) {
        self.set(Mode::Pass);
    }

    /// Forwards nothing, keeps every connection open, accepts new ones.
    pub fn blackhole(&self) {
        self.set(Mode::Blackhole);
    }

    /// Resets every connection and every new one.
    pub fn reset(&self) {
        self.set(Mode::Reset);
    }

    /// Holds each chunk for `ms` milliseconds.
    pub fn delay(&self, ms: u64) {
        self.set(Mode::Delay(Duration::from_millis(ms)));
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Linger 0: dropping the socket sends a reset, not a FIN (and does not block: the
/// deprecation is about a non-zero linger).
#[allow(deprecated)]
fn reset_on_drop(stream: &TcpStream) -> std::io::Result<()> {
    stream.set_linger(Some(Duration::ZERO))
}

/// Waits while `mode` is a blackhole; `false` when the link must end (reset or stop).
async fn wait_while_blackholed(mode: &mut watch::Receiver<Mode>) -> bool {
    loop {
        match *mode.borrow_and_update() {
            Mode::Reset => return false,
            Mode::Blackhole => {}
            Mode::Pass | Mode::Delay(_) => return true,
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

/// One proxied connection: two directions, each a reader and a writer joined by a queue of
/// (forward-at, bytes), torn down (with resets) when the mode becomes `Reset` or the proxy stops.
async fn link(
    client: TcpStream,
    upstream: u16,
    mut mode: watch::Receiver<Mode>,
    mut stop: watch::Receiver<bool>,
) {
    if *mode.borrow() == Mode::Reset {
        let _ = reset_on_drop(&client);
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        let _ = reset_on_drop(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = reset_on_drop(&client);
    let _ = reset_on_drop(&server);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = direction(client_read, server_write, mode.clone());
    let down = direction(server_read, client_write, mode.clone());
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = async {
            loop {
                if *mode.borrow_and_update() == Mode::Reset || mode.changed().await.is_err() {
                    return;
                }
            }
        } => {}
        _ = stop.changed() => {}
    }
    // Dropping the halves (linger 0) resets both sockets.
}

/// One direction of a link; returns when either side closed.
async fn direction(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mode: watch::Receiver<Mode>) {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut reader_mode = mode.clone();
    let reader = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            if !wait_while_blackholed(&mut reader_mode).await {
                return;
            }
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            let delay = match *reader_mode.borrow() {
                Mode::Delay(delay) => delay,
                _ => Duration::ZERO,
            };
            if queue
                .send((Instant::now() + delay, buffer[..read].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let mut writer_mode = mode;
    let writer = async move {
        while let Some((at, chunk)) = queued.recv().await {
            tokio::time::sleep_until(at).await;
            if !wait_while_blackholed(&mut writer_mode).await {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // The writer drains what the reader queued before the reader saw the end.
    let (_, _) = tokio::join!(reader, writer);
}
