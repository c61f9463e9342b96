//! Waiting for replicas (`redis.wait_replicas`): `WAIT` after `schedule`, `schedule_many`,
//! `cancel` and `ack`, on the connection and master that took the write.
//!
//! `WAIT n timeout` waits until `n` replicas acknowledged every write made so far *on that
//! client connection*, so it goes on the same connection as the write (the producers' or the
//! acks' one), to the master of the write's slot. One `WAIT` covers every earlier write of its
//! connection to that master, so concurrent callers share one: on one server or a Sentinel
//! master per connection, on a cluster per connection and partition slot (see `batch.rs`:
//! callers arriving while a `WAIT` is in flight join the next one, which is sent after their
//! writes). A `WAIT` blocks its connection until it returns, which is why acks get their own
//! connection when this is on: the claims on the firing connection never wait for replicas.
//!
//! When fewer replicas confirm within the timeout, the caller gets
//! [`StorageError::ReplicationTimeout`] (transient) after about that timeout. The write stays
//! on the master. An `ack` that was applied but not confirmed is remembered (for
//! [`UNCONFIRMED_KEPT`]): the engine retries it while the lease holds, and a retry with the
//! same token only waits for the replicas again, then reports the outcome of the first call
//! (the script would now call the token stale, as the task is no longer in flight).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use delayq_redis::{RedisConnection, TopologyKind};
use parking_lot::Mutex;

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
    /// One `WAIT` in flight per connection and route (the slot's key on a cluster).
    waits: Batcher<(Writer, String), (), WaitReply>,
    /// Acks applied but not confirmed, with their outcome and when.
    unconfirmed: Mutex<HashMap<LeaseToken, (AckOutcome, Instant)>>,
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
            unconfirmed: Mutex::new(HashMap::new()),
        })
    }

    fn unconfirmed_ack(&self, token: &LeaseToken) -> Option<AckOutcome> {
        self.unconfirmed
            .lock()
            .get(token)
            .map(|(outcome, _)| *outcome)
    }

    fn remember_ack(&self, token: &LeaseToken, outcome: AckOutcome) {
        let now = Instant::now();
        let mut unconfirmed = self.unconfirmed.lock();
        unconfirmed.retain(|_, (_, at)| now.duration_since(*at) < UNCONFIRMED_KEPT);
        if unconfirmed.len() >= UNCONFIRMED_MAX {
            let oldest = unconfirmed
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(token, _)| token.clone());
            if let Some(oldest) = oldest {
                unconfirmed.remove(&oldest);
            }
        }
        unconfirmed.insert(token.clone(), (outcome, now));
    }

    fn forget_ack(&self, token: &LeaseToken) {
        self.unconfirmed.lock().remove(token);
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
        let Some(replication) = &self.replication else {
            return Ok(());
        };
        let route = match self.firing.kind() {
            TopologyKind::Cluster => self.keys(partition).due,
            // One master: one WAIT covers every partition.
            TopologyKind::Standalone | TopologyKind::Sentinel => String::new(),
        };
        let store = self.clone();
        let reply = replication
            .waits
            .submit(
                operation,
                (writer, route),
                (),
                move |(writer, route), items| {
                    let store = store.clone();
                    async move { store.wait_once(writer, &route, items.len()).await }
                },
            )
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

    /// One `WAIT` for `count` callers.
    async fn wait_once(
        &self,
        writer: Writer,
        route: &str,
        count: usize,
    ) -> Vec<StorageResult<WaitReply>> {
        let Some(replication) = &self.replication else {
            return (0..count).map(|_| Ok(Ok(0))).collect();
        };
        let connection: &RedisConnection = match writer {
            Writer::Producer => &self.producer,
            Writer::Acker => &self.acker,
        };
        let wait = replication.wait;
        let reply = within(
            self.deadline,
            connection.wait_replicas(route, wait.replicas, wait.timeout),
        )
        .await;
        (0..count)
            .map(|_| {
                Ok(match &reply {
                    Ok(confirmed) => Ok(*confirmed),
                    Err(delayq_redis::Error::ReplicasNotConfirmed { confirmed, .. }) => {
                        Ok(*confirmed)
                    }
                    Err(error) => Err(copy_error(error)),
                })
            })
            .collect()
    }
}
