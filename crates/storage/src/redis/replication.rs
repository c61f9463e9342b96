//! Waiting for replicas (`redis.wait_replicas`): `WAIT` after `schedule`, `schedule_many`,
//! `cancel` and `ack`, on the connection and master that took the write.
//!
//! `WAIT n timeout` waits until `n` replicas acknowledged every write made so far *on that
//! client connection* to that server, so it goes on the same connection as the write (the
//! producers' or the acks' one), to the master of the write's slot. One `WAIT` covers every
//! earlier write of its connection to that master, so concurrent callers share them (see
//! `batch.rs`: callers arriving while `WAIT`s are in flight join the next round, sent after
//! their writes): on one server or a Sentinel master one `WAIT` per round; on a cluster one per
//! master, in parallel, each routed by the slot of one of the writes it covers. The slots of a
//! round are grouped by master by asking each slot's master who it is (`CLUSTER NODES`, the
//! `myself` line) through the same routing as the writes, because a `WAIT` blocks its
//! connection until it returns: a `WAIT` per slot would queue up on each master, and without
//! replicas take `slots x timeout`. That blocking is also why acks get their own connection
//! when this is on: the claims on the firing connection never wait for replicas.
//!
//! When fewer replicas confirm within the timeout, the caller gets
//! [`StorageError::ReplicationTimeout`] (transient) after about that timeout. The write stays
//! on the master. An `ack` that was applied but not confirmed is remembered (for
//! [`UNCONFIRMED_KEPT`]): a retry with the same token only waits for the replicas again, then
//! reports the outcome of the first call (the script would now call the token stale, as the
//! task is no longer in flight). The engine does not retry an ack for this error (it is
//! applied: the node counts it done, see the engine's `unconfirmed.rs`), only for a lost
//! connection or a timeout, which may come after the script applied it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use delayq_redis::{RedisConnection, TopologyKind};
use futures::future::join_all;
use parking_lot::Mutex;
use redis::cluster_routing::Slot;

use crate::error::{StorageError, StorageResult};
use crate::model::{AckOutcome, LeaseToken, Partition};

use super::batch::Batcher;
use super::connection::{within, RedisStore};
use super::error_map::{copy_error, map_error};
use super::WaitReplicas;

/// How long an applied but unconfirmed ack is remembered for a retry (well beyond any lease).
pub(crate) const UNCONFIRMED_KEPT: Duration = Duration::from_secs(600);
/// The most unconfirmed acks remembered; the oldest are dropped beyond it.
const UNCONFIRMED_MAX: usize = 100_000;

/// Which connection took the write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Writer {
    /// Schedules and cancels.
    Producer,
    /// Acks.
    Acker,
}

/// What one `WAIT` answered: the replicas that confirmed, or the connection's error.
type WaitReply = Result<u32, delayq_redis::Error>;

/// The store's waiting for replicas.
pub(crate) struct Replication {
    wait: WaitReplicas,
    /// One round of `WAIT`s in flight per connection; an item is the key a write went to.
    waits: Batcher<Writer, String, WaitReply>,
    /// Acks applied but not confirmed.
    unconfirmed: Mutex<Unconfirmed>,
}

/// Acks applied but not confirmed, with their outcome and when, and the order they came in
/// (oldest first; an entry whose ack was confirmed or remembered again since stays in the
/// order until it comes to the front): remembering one costs O(1), not a scan of them all.
#[derive(Default)]
struct Unconfirmed {
    acks: HashMap<LeaseToken, (AckOutcome, Instant)>,
    order: VecDeque<(Instant, LeaseToken)>,
}

impl Replication {
    /// Checks `wait` against the response timeout (a `WAIT` must answer within one).
    pub(crate) fn new(wait: WaitReplicas, response: Duration) -> StorageResult<Self> {
        if wait.timeout.is_zero() || wait.timeout >= response {
            let invalid = delayq_redis::Error::InvalidConfig {
                field: "redis.wait_timeout",
                value: format!("{:?}", wait.timeout),
                reason: format!("must be above zero and below the response timeout ({response:?})"),
            };
            return Err(StorageError::Backend {
                operation: "connect",
                message: invalid.to_string(),
            });
        }
        Ok(Replication {
            wait,
            waits: Batcher::default(),
            unconfirmed: Mutex::new(Unconfirmed::default()),
        })
    }

    fn unconfirmed_ack(&self, token: &LeaseToken) -> Option<AckOutcome> {
        self.unconfirmed
            .lock()
            .acks
            .get(token)
            .map(|(outcome, _)| *outcome)
    }

    fn remember_ack(&self, token: &LeaseToken, outcome: AckOutcome) {
        let now = Instant::now();
        let mut unconfirmed = self.unconfirmed.lock();
        let Unconfirmed { acks, order } = &mut *unconfirmed;
        while let Some((at, oldest)) = order.front() {
            let expired = now.duration_since(*at) >= UNCONFIRMED_KEPT;
            if !expired && acks.len() < UNCONFIRMED_MAX && order.len() < 2 * UNCONFIRMED_MAX {
                break;
            }
            // Only the entry this place in the order stands for (not a later one).
            if acks.get(oldest).is_some_and(|(_, kept)| kept == at) {
                acks.remove(oldest);
            }
            order.pop_front();
        }
        acks.insert(token.clone(), (outcome, now));
        order.push_back((now, token.clone()));
    }

    fn forget_ack(&self, token: &LeaseToken) {
        self.unconfirmed.lock().acks.remove(token);
    }
}

impl RedisStore {
    /// Returns once `wait_replicas` replicas confirmed the writes `writer`'s connection made
    /// to `partition`'s master so far; at once when no waiting is configured.
    pub(crate) async fn confirm(
        &self,
        writer: Writer,
        partition: &Partition,
        operation: &'static str,
    ) -> StorageResult<()> {
        if self.replication.is_none() {
            return Ok(());
        }
        self.confirm_key(writer, &self.keys(partition).due, operation)
            .await
    }

    /// Returns once `wait_replicas` replicas confirmed the writes `writer`'s connection made
    /// to the master of `key`'s slot so far; at once when no waiting is configured.
    pub(crate) async fn confirm_key(
        &self,
        writer: Writer,
        key: &str,
        operation: &'static str,
    ) -> StorageResult<()> {
        let Some(replication) = &self.replication else {
            return Ok(());
        };
        let route = match self.firing.kind() {
            TopologyKind::Cluster => key.to_owned(),
            // One master: any route reaches it.
            TopologyKind::Standalone | TopologyKind::Sentinel => String::new(),
        };
        let store = self.clone();
        let reply = replication
            .waits
            .submit(operation, writer, route, move |writer, routes| {
                let store = store.clone();
                async move { store.wait_round(writer, routes).await }
            })
            .await?;
        let wanted = replication.wait.replicas;
        match reply {
            Ok(confirmed) if confirmed >= wanted => Ok(()),
            Ok(confirmed) => Err(StorageError::ReplicationTimeout {
                operation,
                wanted,
                confirmed,
            }),
            Err(error) => Err(map_error(operation, "", error)),
        }
    }

    /// Confirms an ack of `token`: after `ack` applied it (`applied`), or when a retry finds
    /// it applied but unconfirmed earlier. Returns the outcome to report, if this call is
    /// settled by the replicas alone (`None`: run the ack script).
    pub(crate) async fn confirm_ack(
        &self,
        token: &LeaseToken,
        applied: Option<AckOutcome>,
    ) -> Option<StorageResult<AckOutcome>> {
        let replication = self.replication.as_ref()?;
        let outcome = match applied {
            Some(outcome) => outcome,
            None => replication.unconfirmed_ack(token)?,
        };
        match self.confirm(Writer::Acker, &token.partition, "ack").await {
            Ok(()) => {
                replication.forget_ack(token);
                Some(Ok(outcome))
            }
            Err(error) => {
                replication.remember_ack(token, outcome);
                Some(Err(error))
            }
        }
    }

    /// One round of `WAIT`s for the writes to `routes` (one per caller): one `WAIT` per
    /// master, in parallel; one result per route.
    async fn wait_round(
        &self,
        writer: Writer,
        routes: Vec<String>,
    ) -> Vec<StorageResult<WaitReply>> {
        let connection: &RedisConnection = match writer {
            Writer::Producer => &self.producer,
            Writer::Acker => &self.acker,
        };
        // The slots of the round, each with one of its routes.
        let mut slots: Vec<(Slot, &str)> = Vec::new();
        for route in &routes {
            let slot = Slot::for_key(route);
            if !slots.iter().any(|(seen, _)| *seen == slot) {
                slots.push((slot, route));
            }
        }
        let masters: Vec<Option<String>> = match connection.kind() {
            TopologyKind::Cluster if slots.len() > 1 => {
                join_all(
                    slots
                        .iter()
                        .map(|(_, route)| self.node_id(connection, route)),
                )
                .await
            }
            _ => slots.iter().map(|_| Some(String::new())).collect(),
        };
        // Slots whose master did not say who it is wait alone.
        let mut groups: Vec<(Option<String>, &str, Vec<Slot>)> = Vec::new();
        for ((slot, route), master) in slots.iter().zip(masters) {
            match groups
                .iter_mut()
                .find(|(id, _, _)| id.is_some() && *id == master)
            {
                Some((_, _, members)) => members.push(*slot),
                None => groups.push((master, route, vec![*slot])),
            }
        }
        let replies = join_all(
            groups
                .iter()
                .map(|(_, route, _)| self.wait_at(connection, route)),
        )
        .await;
        routes
            .iter()
            .map(|route| {
                let slot = Slot::for_key(route);
                let reply = groups
                    .iter()
                    .zip(&replies)
                    .find(|((_, _, members), _)| members.contains(&slot))
                    .map(|(_, reply)| match reply {
                        Ok(confirmed) => Ok(*confirmed),
                        Err(error) => Err(copy_error(error)),
                    });
                Ok(reply.unwrap_or(Ok(0)))
            })
            .collect()
    }

    /// One `WAIT` on `connection`, routed by `route`: the replicas that confirmed.
    async fn wait_at(&self, connection: &RedisConnection, route: &str) -> WaitReply {
        let Some(replication) = &self.replication else {
            return Ok(0);
        };
        let wait = replication.wait;
        match within(
            self.deadline,
            connection.wait_replicas(route, wait.replicas, wait.timeout),
        )
        .await
        {
            Ok(confirmed) => Ok(confirmed),
            Err(delayq_redis::Error::ReplicasNotConfirmed { confirmed, .. }) => Ok(confirmed),
            Err(error) => Err(error),
        }
    }

    /// The id of the master `route`'s slot is routed to (the `myself` line of its
    /// `CLUSTER NODES`), if it answers.
    async fn node_id(&self, connection: &RedisConnection, route: &str) -> Option<String> {
        let mut command = redis::cmd("CLUSTER");
        command.arg("NODES");
        let nodes: String = within(
            self.deadline,
            connection.query_at_slot_of("CLUSTER NODES", route, &command),
        )
        .await
        .ok()?;
        myself(&nodes)
    }
}

/// The node id on the `myself` line of a `CLUSTER NODES` reply.
fn myself(nodes: &str) -> Option<String> {
    nodes.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let id = fields.next()?;
        let _address = fields.next()?;
        let flags = fields.next()?;
        flags
            .split(',')
            .any(|flag| flag == "myself")
            .then(|| id.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::myself;

    #[test]
    fn the_myself_line_names_the_node() {
        let nodes = "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n\
                     e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460\n";
        assert_eq!(
            myself(nodes).as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(myself("garbage"), None);
    }
}
