//! A TCP proxy in front of a Redis server that can turn the subscriber connections going
//! through it half-open: their bytes are read and dropped in both directions, while the
//! sockets stay open (a dead host or a dropped route, without a reset). New connections
//! work as usual. It can also hold every chunk for a while before forwarding it (a slow
//! link: late heartbeats).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One proxied connection's state.
#[derive(Default)]
struct Link {
    /// The client sent a (S)SUBSCRIBE on it.
    subscriber: AtomicBool,
    /// Its bytes are dropped.
    frozen: AtomicBool,
}

/// A running proxy; stops with the test's runtime.
pub struct Proxy {
    port: u16,
    links: Arc<parking_lot::Mutex<Vec<Arc<Link>>>>,
    accepted: Arc<AtomicUsize>,
    delay_ms: Arc<AtomicU64>,
}

impl Proxy {
    /// Listens on a free port and forwards to `127.0.0.1:<upstream>`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let links: Arc<parking_lot::Mutex<Vec<Arc<Link>>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (all, count, delay) = (links.clone(), accepted.clone(), delay_ms.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let link = Arc::new(Link::default());
                all.lock().push(link.clone());
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(
                    client_read,
                    server_write,
                    link.clone(),
                    true,
                    delay.clone(),
                ));
                tokio::spawn(pump(server_read, client_write, link, false, delay.clone()));
            }
        });
        Proxy {
            port,
            links,
            accepted,
            delay_ms,
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

    /// Holds every chunk read from now on for `ms` before forwarding it (0: none).
    pub fn set_delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Makes every subscriber connection open now half-open; returns how many.
    pub fn freeze_subscribers(&self) -> usize {
        let links = self.links.lock();
        let mut frozen = 0;
        for link in links.iter() {
            if link.subscriber.load(Ordering::SeqCst) {
                link.frozen.store(true, Ordering::SeqCst);
                frozen += 1;
            }
        }
        frozen
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: Arc<Link>,
    from_client: bool,
    delay_ms: Arc<AtomicU64>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let chunk = &buffer[..read];
        if from_client
            && chunk
                .windows(9)
                .any(|window| window.eq_ignore_ascii_case(b"SUBSCRIBE"))
        {
            link.subscriber.store(true, Ordering::SeqCst);
        }
        if link.frozen.load(Ordering::SeqCst) {
            continue;
        }
        let delay = delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}
