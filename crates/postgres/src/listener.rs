//! A LISTEN/NOTIFY listener on its own connection, that outlives the connection: when it
//! drops (a restart, `pg_terminate_backend`, a failover, a silent network), the listener
//! connects again with backoff, LISTENs on every channel again, and says
//! [`ListenerEvent::Resumed`]: notifications sent while it was away are lost, so whoever
//! relies on them reads the state they would have announced.
//!
//! ```no_run
//! # async fn example(db: &delayq_postgres::Database) -> delayq_postgres::Result<()> {
//! use delayq_postgres::{Listener, ListenerEvent, ListenerOptions};
//!
//! let mut listener = Listener::start(db, ListenerOptions::new(["delayq_wake"])).await?;
//! while let Some(event) = listener.next().await {
//!     match event {
//!         ListenerEvent::Notification(note) => println!("{}: {}", note.channel, note.payload),
//!         ListenerEvent::Resumed(_) => { /* re-read what the notifications would have told */ }
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! NOTIFY is transactional: a notification is delivered when (and only if) the transaction
//! that sent it commits. The listener's session shows in `pg_stat_activity` with the
//! `application_name` of the pool suffixed by `-listener`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client};
use tracing::Instrument;

use crate::config::quote_ident;
use crate::error::{Error, Result};
use crate::pool::{Database, DedicatedConnection, RetryPolicy};

/// A notification as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The channel it was sent on.
    pub channel: String,
    /// Its payload (empty if none).
    pub payload: String,
    /// The sending backend's process id.
    pub process_id: i32,
}

/// Why notifications may have been missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeReason {
    /// The connection dropped; a new one LISTENs on every channel again.
    Reconnected,
    /// The reader fell behind and notifications were dropped to keep memory bounded.
    Lagged,
}

/// What a [`Listener`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerEvent {
    /// A notification on one of the channels.
    Notification(Notification),
    /// Notifications may have been missed since the last event: re-read the state.
    Resumed(ResumeReason),
}

/// How a [`Listener`] behaves.
#[derive(Debug, Clone)]
pub struct ListenerOptions {
    /// The channels to LISTEN on from the start.
    pub channels: Vec<String>,
    /// How often an idle connection is checked with `SELECT 1` (a dead peer that sent no
    /// FIN is noticed within this plus `ping_timeout`).
    pub ping_period: Duration,
    /// How long the check may take.
    pub ping_timeout: Duration,
    /// The pause after a failed connection, doubled up to `reconnect.max_backoff`.
    pub reconnect: RetryPolicy,
    /// Events held for a slow reader before notifications are dropped (and
    /// [`ResumeReason::Lagged`] said).
    pub capacity: usize,
}

impl ListenerOptions {
    /// The defaults for `channels`: a check every 15 s, reconnects from 50 ms to 2 s apart,
    /// 4096 events held.
    pub fn new<I, S>(channels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ListenerOptions {
            channels: channels.into_iter().map(Into::into).collect(),
            ping_period: Duration::from_secs(15),
            ping_timeout: Duration::from_secs(5),
            reconnect: RetryPolicy {
                max_elapsed: Duration::MAX,
                initial_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(2),
            },
            capacity: 4096,
        }
    }
}

enum Command {
    Listen(String, oneshot::Sender<Result<()>>),
    Unlisten(String, oneshot::Sender<Result<()>>),
}

/// A LISTEN connection and the task that keeps it. Dropping the listener closes it.
#[derive(Debug)]
pub struct Listener {
    events: mpsc::Receiver<ListenerEvent>,
    lagged: Arc<AtomicBool>,
    commands: mpsc::UnboundedSender<Command>,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Connects, LISTENs on `options.channels` and returns once they are in effect: a
    /// notification committed after this returns is delivered. Fails when the first
    /// connection cannot be made within `database`'s retry policy.
    pub async fn start(database: &Database, options: ListenerOptions) -> Result<Listener> {
        for channel in &options.channels {
            check_channel(channel)?;
        }
        let (events_tx, events) = mpsc::channel(options.capacity.max(1));
        let lagged = Arc::new(AtomicBool::new(false));
        let channels: BTreeSet<String> = options.channels.iter().cloned().collect();
        let mut keeper = Keeper {
            database: database.clone(),
            options,
            channels,
            events: events_tx,
            lagged: lagged.clone(),
        };
        let started = Instant::now();
        let mut attempt = 1;
        let first = loop {
            match keeper.connect().await {
                Ok(live) => break live,
                Err(error)
                    if database
                        .pause_before_retry("listen", started, attempt, &error)
                        .await =>
                {
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        };
        let (commands, command_rx) = mpsc::unbounded_channel();
        let span = tracing::info_span!("postgres_listener", target = database.target());
        let task = tokio::spawn(keeper.keep(first, command_rx).instrument(span));
        Ok(Listener {
            events,
            lagged,
            commands,
            task,
        })
    }

    /// The next event; `None` only if the listener's task ended (it does not, while the
    /// listener lives).
    pub async fn next(&mut self) -> Option<ListenerEvent> {
        if self.lagged.swap(false, Ordering::SeqCst) {
            return Some(ListenerEvent::Resumed(ResumeReason::Lagged));
        }
        self.events.recv().await
    }

    /// LISTENs on `channel` too (now and after every reconnect). Returns once it is in
    /// effect, or once the channel is recorded while the connection is being remade (a
    /// [`ListenerEvent::Resumed`] follows then).
    pub async fn listen(&self, channel: &str) -> Result<()> {
        check_channel(channel)?;
        self.ask(|reply| Command::Listen(channel.to_owned(), reply))
            .await
    }

    /// Stops listening on `channel`.
    pub async fn unlisten(&self, channel: &str) -> Result<()> {
        self.ask(|reply| Command::Unlisten(channel.to_owned(), reply))
            .await
    }

    async fn ask(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<()>>) -> Command,
    ) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        let gone = || Error::Database {
            operation: "listen",
            class: crate::ErrorClass::Permanent,
            code: None,
            message: "the listener's task has ended".to_owned(),
        };
        self.commands.send(command(reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// A channel name PostgreSQL accepts: 1 to 63 bytes, no NUL.
fn check_channel(channel: &str) -> Result<()> {
    if channel.is_empty() || channel.len() > 63 || channel.contains('\0') {
        return Err(Error::invalid(
            "listen channel",
            channel,
            "a channel name is 1 to 63 bytes without NUL",
        ));
    }
    Ok(())
}

/// One live connection: its client, and a signal that fires when its driver ends.
struct Live {
    client: Client,
    closed: oneshot::Receiver<()>,
    driver: JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// The listener's task state.
struct Keeper {
    database: Database,
    options: ListenerOptions,
    channels: BTreeSet<String>,
    events: mpsc::Sender<ListenerEvent>,
    lagged: Arc<AtomicBool>,
}

impl Keeper {
    /// A new connection with its driver running and every channel LISTENed.
    async fn connect(&mut self) -> Result<Live> {
        let (client, connection) = self.database.connect_as("listen", Some("listener")).await?;
        let (closed_tx, closed) = oneshot::channel();
        let driver = tokio::spawn(drive(
            connection,
            self.events.clone(),
            self.lagged.clone(),
            closed_tx,
        ));
        let live = Live {
            client,
            closed,
            driver,
        };
        if !self.channels.is_empty() {
            let sql: String = self
                .channels
                .iter()
                .map(|channel| format!("LISTEN {};", quote_ident(channel)))
                .collect();
            live.client
                .batch_execute(&sql)
                .await
                .map_err(|error| self.database.error("listen", &error))?;
        }
        Ok(live)
    }

    /// Serves commands and watches the connection; remakes it when it drops. Ends when the
    /// [`Listener`] is dropped.
    async fn keep(mut self, first: Live, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut live = Some(first);
        let mut failures = 0;
        loop {
            let Some(mut current) = live.take() else {
                match self.connect().await {
                    Ok(fresh) => {
                        failures = 0;
                        tracing::info!(channels = self.channels.len(), "listener reconnected");
                        if self
                            .events
                            .send(ListenerEvent::Resumed(ResumeReason::Reconnected))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        live = Some(fresh);
                    }
                    Err(error) => {
                        failures += 1;
                        let pause = self.options.reconnect.backoff(failures);
                        tracing::warn!(error = %error, retry_in_ms = pause.as_millis() as u64, "listener cannot reconnect");
                        tokio::time::sleep(pause).await;
                    }
                }
                continue;
            };
            let mut ping = tokio::time::interval(self.options.ping_period);
            ping.tick().await;
            let alive = loop {
                tokio::select! {
                    command = commands.recv() => match command {
                        None => return,
                        Some(command) => {
                            if !self.serve(&current.client, command).await {
                                break false;
                            }
                        }
                    },
                    _ = &mut current.closed => break false,
                    _ = ping.tick() => {
                        let check = tokio::time::timeout(
                            self.options.ping_timeout,
                            current.client.simple_query("SELECT 1"),
                        )
                        .await;
                        if !matches!(check, Ok(Ok(_))) {
                            tracing::warn!("listener connection does not answer");
                            break false;
                        }
                    }
                }
            };
            if !alive {
                tracing::warn!("listener connection lost");
                drop(current);
                // The first reconnect is immediate; later ones back off in the branch above.
            } else {
                live = Some(current);
            }
        }
    }

    /// Applies one command; `false` when the connection turned out to be gone (the channel
    /// set is updated anyway and applied on the next connection).
    async fn serve(&mut self, client: &Client, command: Command) -> bool {
        let (sql, reply, channel, listen) = match command {
            Command::Listen(channel, reply) => (
                format!("LISTEN {}", quote_ident(&channel)),
                reply,
                channel,
                true,
            ),
            Command::Unlisten(channel, reply) => (
                format!("UNLISTEN {}", quote_ident(&channel)),
                reply,
                channel,
                false,
            ),
        };
        if listen {
            self.channels.insert(channel.clone());
        } else {
            self.channels.remove(&channel);
        }
        match client.batch_execute(&sql).await {
            Ok(()) => {
                let _ = reply.send(Ok(()));
                true
            }
            Err(error)
                if client.is_closed() || self.database.error("listen", &error).is_transient() =>
            {
                // Recorded; the reconnect applies it and says Resumed.
                let _ = reply.send(Ok(()));
                false
            }
            Err(error) => {
                if listen {
                    self.channels.remove(&channel);
                }
                let _ = reply.send(Err(self.database.error("listen", &error)));
                true
            }
        }
    }
}

/// Polls the connection, forwarding notifications; fires `closed` when it ends.
async fn drive(
    mut connection: DedicatedConnection,
    events: mpsc::Sender<ListenerEvent>,
    lagged: Arc<AtomicBool>,
    closed: oneshot::Sender<()>,
) {
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(note)) => {
                let event = ListenerEvent::Notification(Notification {
                    channel: note.channel().to_owned(),
                    payload: note.payload().to_owned(),
                    process_id: note.process_id(),
                });
                match events.try_send(event) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => lagged.store(true, Ordering::SeqCst),
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
            Ok(AsyncMessage::Notice(notice)) => {
                tracing::debug!(message = notice.message(), "listener connection notice");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(error = %error, "listener connection ended");
                break;
            }
        }
    }
    let _ = closed.send(());
}
