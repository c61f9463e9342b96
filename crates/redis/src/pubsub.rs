//! A dedicated pub/sub subscriber that keeps its subscriptions through reconnections and
//! failovers: `SUBSCRIBE` on one server or a Sentinel-watched master, sharded `SSUBSCRIBE` on
//! a Redis Cluster (publish with [`crate::RedisConnection::publish`], which picks `PUBLISH` or
//! `SPUBLISH` to match).
//!
//! Messages published while a subscription was being restored are lost (pub/sub keeps
//! nothing); [`PubSubEvent::Resubscribed`] tells the consumer when that may have happened, so
//! it can read what it missed from the data itself.
//!
//! On a cluster, redis-rs restores sharded subscriptions after a reconnection or a slot
//! move, but not after a server-sent `sunsubscribe` (which a master sends when it loses the
//! slot, e.g. when it is demoted): the subscriber then subscribes again itself, retrying
//! until the slot's new master accepts.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisError, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::sentinel::SentinelMaster;

/// How long one attempt to restore a sharded subscription may take.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(1);
/// Pause between two attempts to restore a subscription.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What a [`Subscriber`] receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PubSubEvent {
    /// A message published on a subscribed channel.
    Message {
        /// The channel.
        channel: String,
        /// The payload as published.
        payload: Vec<u8>,
    },
    /// The subscriptions to `channels` were restored after a lost connection, a failover or
    /// a slot move: messages published on them in between were not received.
    Resubscribed {
        /// The channels restored.
        channels: Vec<String>,
    },
}

/// Where the messages come from.
pub(crate) enum Source {
    /// One server.
    Server(Box<redis::Client>),
    /// The master that the sentinels name, followed through failovers.
    Sentinel(SentinelMaster),
    /// A Redis Cluster with RESP3 pushes (sharded pub/sub).
    Cluster {
        client: Box<ClusterClient>,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
    },
}

enum Control {
    Subscribe(String, oneshot::Sender<RedisResult<()>>),
    Unsubscribe(String, oneshot::Sender<RedisResult<()>>),
}

/// A pub/sub subscription set on its own connection. Dropping it closes the connection.
///
/// Made by [`crate::RedisConnection::subscriber`].
#[derive(Debug)]
pub struct Subscriber {
    control: mpsc::UnboundedSender<Control>,
    events: mpsc::UnboundedReceiver<PubSubEvent>,
    task: tokio::task::AbortHandle,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Subscriber {
    /// Starts the subscriber's task on `source` (the cluster connection is made here).
    pub(crate) async fn start(source: Source) -> RedisResult<Self> {
        let (control, control_rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let task = match source {
            Source::Cluster { client, pushes } => {
                let connection = client.get_async_connection().await?;
                tokio::spawn(run_cluster(connection, pushes, control_rx, events_tx))
            }
            Source::Server(client) => {
                tokio::spawn(run_plain(Plain::Server(client), control_rx, events_tx))
            }
            Source::Sentinel(master) => {
                tokio::spawn(run_plain(Plain::Sentinel(master), control_rx, events_tx))
            }
        };
        Ok(Subscriber {
            control,
            events,
            task: task.abort_handle(),
        })
    }

    /// Subscribes to `channel` and waits for the server's confirmation (while the connection
    /// is being restored, until it is).
    pub async fn subscribe(&self, channel: &str) -> RedisResult<()> {
        self.ask(|reply| Control::Subscribe(channel.to_owned(), reply))
            .await
    }

    /// Unsubscribes from `channel`.
    pub async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        self.ask(|reply| Control::Unsubscribe(channel.to_owned(), reply))
            .await
    }

    /// The next message or notice; `None` once the subscriber's task has ended.
    pub async fn next_event(&mut self) -> Option<PubSubEvent> {
        self.events.recv().await
    }

    async fn ask(
        &self,
        control: impl FnOnce(oneshot::Sender<RedisResult<()>>) -> Control,
    ) -> RedisResult<()> {
        let (reply, answer) = oneshot::channel();
        self.control.send(control(reply)).map_err(|_| ended())?;
        answer.await.map_err(|_| ended())?
    }
}

fn ended() -> RedisError {
    RedisError::from((redis::ErrorKind::Client, "the subscriber's task has ended"))
}

enum Plain {
    Server(Box<redis::Client>),
    Sentinel(SentinelMaster),
}

/// One server or a Sentinel master: one `SUBSCRIBE` connection, made again (and the channels
/// subscribed again) whenever it drops or the sentinels name another master.
async fn run_plain(
    source: Plain,
    mut control: mpsc::UnboundedReceiver<Control>,
    events: mpsc::UnboundedSender<PubSubEvent>,
) {
    let mut channels: HashSet<String> = HashSet::new();
    let mut first = true;
    loop {
        let (client, mut changes) = match &source {
            Plain::Server(client) => (client.as_ref().clone(), None),
            Plain::Sentinel(master) => {
                let changes = master.changes();
                match master.master().await {
                    Ok(current) => (current.client, Some(changes)),
                    Err(error) => {
                        tracing::debug!(%error, "subscriber: no master yet");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                }
            }
        };
        let (mut sink, mut messages) = match client.get_async_pubsub().await {
            Ok(pubsub) => pubsub.split(),
            Err(error) => {
                tracing::debug!(%error, "subscriber: cannot connect");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        if !channels.is_empty() {
            let list: Vec<&String> = channels.iter().collect();
            if let Err(error) = sink.subscribe(list).await {
                tracing::debug!(%error, "subscriber: cannot subscribe again");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        }
        if !first && !channels.is_empty() {
            tracing::info!(channels = channels.len(), "subscriptions restored");
            let _ = events.send(PubSubEvent::Resubscribed {
                channels: channels.iter().cloned().collect(),
            });
        }
        first = false;
        loop {
            let moved = async {
                match changes.as_mut() {
                    Some(changes) => changes.changed().await.is_err(),
                    None => std::future::pending::<bool>().await,
                }
            };
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => {
                        let _ = events.send(PubSubEvent::Message {
                            channel: message.get_channel_name().to_owned(),
                            payload: message.get_payload_bytes().to_vec(),
                        });
                    }
                    None => {
                        tracing::info!("subscriber lost its connection; reconnecting");
                        if let Plain::Sentinel(master) = &source {
                            master.suspect(client.get_connection_info().addr().to_string());
                        }
                        break;
                    }
                },
                request = control.recv() => match request {
                    None => return,
                    Some(Control::Subscribe(channel, reply)) => {
                        let result = sink.subscribe(&channel).await;
                        channels.insert(channel);
                        let _ = reply.send(result);
                    }
                    Some(Control::Unsubscribe(channel, reply)) => {
                        channels.remove(&channel);
                        let _ = reply.send(sink.unsubscribe(&channel).await);
                    }
                },
                _ = moved => {
                    tracing::info!("the sentinels named another master; subscribing there");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A cluster: sharded subscriptions on a RESP3 cluster connection. redis-rs restores them
/// after reconnections and slot moves; a server-sent `sunsubscribe` or a dropped node
/// connection makes this task subscribe again itself until a master accepts.
async fn run_cluster(
    connection: ClusterConnection,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    mut control: mpsc::UnboundedReceiver<Control>,
    events: mpsc::UnboundedSender<PubSubEvent>,
) {
    let channels: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut restoring: JoinSet<String> = JoinSet::new();
    let mut pending: HashSet<String> = HashSet::new();
    let wanted = |channels: &Arc<Mutex<HashSet<String>>>, channel: &str| {
        channels
            .lock()
            .map(|set| set.contains(channel))
            .unwrap_or(false)
    };
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let Some(push) = push else { return };
                match push.kind {
                    PushKind::SMessage => {
                        if let [channel, payload, ..] = push.data.as_slice() {
                            let _ = events.send(PubSubEvent::Message {
                                channel: text(channel),
                                payload: bytes(payload),
                            });
                        }
                    }
                    PushKind::SUnsubscribe => {
                        let channel = push.data.first().map(text).unwrap_or_default();
                        if wanted(&channels, &channel) && pending.insert(channel.clone()) {
                            tracing::info!(%channel, "server dropped a sharded subscription; subscribing again");
                            restoring.spawn(restore(connection.clone(), channels.clone(), channel));
                        }
                    }
                    PushKind::Disconnection => {
                        let all: Vec<String> = channels
                            .lock()
                            .map(|set| set.iter().cloned().collect())
                            .unwrap_or_default();
                        for channel in all {
                            if pending.insert(channel.clone()) {
                                restoring.spawn(restore(connection.clone(), channels.clone(), channel));
                            }
                        }
                    }
                    _ => {}
                }
            }
            Some(done) = restoring.join_next(), if !restoring.is_empty() => {
                if let Ok(channel) = done {
                    pending.remove(&channel);
                    if wanted(&channels, &channel) {
                        let _ = events.send(PubSubEvent::Resubscribed { channels: vec![channel] });
                    }
                }
            }
            request = control.recv() => match request {
                None => return,
                Some(Control::Subscribe(channel, reply)) => {
                    if let Ok(mut set) = channels.lock() {
                        set.insert(channel.clone());
                    }
                    let mut connection = connection.clone();
                    let _ = reply.send(connection.ssubscribe(&channel).await);
                }
                Some(Control::Unsubscribe(channel, reply)) => {
                    if let Ok(mut set) = channels.lock() {
                        set.remove(&channel);
                    }
                    let mut connection = connection.clone();
                    let _ = reply.send(connection.sunsubscribe(&channel).await);
                }
            },
        }
    }
}

/// Subscribes to `channel` again until the slot's master accepts or it is no longer wanted.
async fn restore(
    mut connection: ClusterConnection,
    channels: Arc<Mutex<HashSet<String>>>,
    channel: String,
) -> String {
    loop {
        let wanted = channels
            .lock()
            .map(|set| set.contains(&channel))
            .unwrap_or(false);
        if !wanted {
            return channel;
        }
        // One attempt may not wait for redis-rs's own retries against a dead node.
        let attempt = tokio::time::timeout(ATTEMPT_LIMIT, connection.ssubscribe(&channel)).await;
        match attempt.unwrap_or_else(|_| Err(RedisError::from((redis::ErrorKind::Io, "no answer"))))
        {
            Ok(()) => return channel,
            Err(error) => {
                tracing::debug!(%channel, %error, "sharded subscription not restored yet");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

fn text(value: &Value) -> String {
    String::from_utf8_lossy(&bytes(value)).into_owned()
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(text) => text.as_bytes().to_vec(),
        other => format!("{other:?}").into_bytes(),
    }
}
