//! Flow keys (DESIGN.md, "Flow keys: per-key limits and order"): the key of a task id, the
//! queue layout that routes by it, and the per-key limits a claim applies.
//!
//! A task's flow key is the part of its id between the first `{` and the next `}`, when that
//! part is not empty: Redis's hash-tag rule, so `order:{customer-7}:42` has the key
//! `customer-7` and `order:{}:42` has none. On a queue registered with `flow_keys: true`
//! every keyed id of one key lives in one partition (`stable_hash(key) % partitions`), so
//! the key's limits are decided inside the partition's atomic claim, with no lock to leak.
//!
//! # How a claim keeps a key's limits (every backend)
//! - A task of a key **holds** one of the key's slots from its claim until it ends (ack,
//!   dead letter, cancel, a new schedule of its id). With `per_key_order: fifo` the hold also
//!   lasts through a retry's wait and a requeue after a lost lease, so a later task of the key
//!   waits for it; otherwise the hold ends when the attempt fails and the retry takes a slot
//!   again when it is claimed.
//! - A due task whose key has no free slot is **parked**: it leaves the pending index for the
//!   key's own ordered set, and a claim never looks at it again until a slot of its key
//!   frees (the release moves the key's earliest parked task back to pending at its old
//!   time). So a blocked key never holds back another key of the partition, and a key with
//!   100,000 waiting tasks costs O(log n) per fire: each task is parked at most once per
//!   release, never scanned.
//! - A due task whose key used up its `per_key_rate` in the sliding period waits in the
//!   pending index at the time the oldest fire of the period leaves it (one such task per
//!   key, the key's **representative**); the key's other due tasks are parked behind it and
//!   follow it one release or one fire at a time.
//! - The number of keys is unbounded: a key costs only while it has a task held, parked or a
//!   fire within its rate period.

use crate::error::StorageError;
use crate::hash::stable_hash;
use crate::model::TaskId;

/// The flow key of a task id (Redis's hash-tag rule): the part between the first `{` and the
/// next `}`, when it is not empty.
///
/// ```
/// use delayq_storage::flow_key_of;
/// assert_eq!(flow_key_of("order:{customer-7}:42"), Some("customer-7"));
/// assert_eq!(flow_key_of("order:{}:{x}"), None);
/// assert_eq!(flow_key_of("order-42"), None);
/// ```
pub fn flow_key_of(id: &str) -> Option<&str> {
    let open = id.find('{')?;
    let rest = &id[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

impl TaskId {
    /// The id's flow key ([`flow_key_of`]).
    pub fn flow_key(&self) -> Option<&str> {
        flow_key_of(self.as_str())
    }

    /// The id `<prefix>:{<key>}:<rest>`: a task of flow key `key`. Fails with
    /// [`StorageError::InvalidFlowKey`] when `key` is empty or holds `{` or `}`, and as
    /// [`TaskId::new`] for the whole id.
    ///
    /// ```
    /// use delayq_storage::TaskId;
    /// let id = TaskId::keyed("webhook", "api.example.com", "evt-9")?;
    /// assert_eq!(id.as_str(), "webhook:{api.example.com}:evt-9");
    /// assert_eq!(id.flow_key(), Some("api.example.com"));
    /// # Ok::<(), delayq_storage::StorageError>(())
    /// ```
    pub fn keyed(prefix: &str, key: &str, rest: &str) -> Result<TaskId, StorageError> {
        if key.is_empty() || key.contains(['{', '}']) {
            return Err(StorageError::InvalidFlowKey {
                key: key.to_owned(),
                reason: if key.is_empty() {
                    "it is empty"
                } else {
                    "it contains '{' or '}'"
                },
            });
        }
        TaskId::new(format!("{prefix}:{{{key}}}:{rest}"))
    }
}

/// How a queue's ids map to its partitions, fixed when the queue is first registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueLayout {
    /// The number of partitions.
    pub partitions: u32,
    /// Whether ids with a flow key are routed by their key (`flow_keys`).
    pub flow_keys: bool,
}

impl QueueLayout {
    /// A queue of `partitions` partitions that routes every id by the whole id.
    pub fn plain(partitions: u32) -> Self {
        QueueLayout {
            partitions,
            flow_keys: false,
        }
    }

    /// The partition of `id`: `stable_hash(key) % partitions` for a keyed id on a queue with
    /// flow keys, else [`partition_of`](crate::partition_of).
    ///
    /// # Panics
    /// When `partitions` is 0.
    pub fn partition_of(&self, id: &TaskId) -> u32 {
        match id.flow_key().filter(|_| self.flow_keys) {
            Some(key) => {
                assert!(self.partitions > 0, "a queue has at least one partition");
                (stable_hash(key.as_bytes()) % u64::from(self.partitions)) as u32
            }
            None => crate::hash::partition_of(id, self.partitions),
        }
    }
}

/// Checks a registration against the `recorded` layout: the partition count always, the
/// flow-key setting when one is asked for.
pub(crate) fn check_layout(
    queue: &crate::model::QueueName,
    recorded: &QueueLayout,
    partitions: u32,
    flow_keys: Option<bool>,
) -> Result<(), StorageError> {
    if recorded.partitions != partitions {
        return Err(StorageError::PartitionMismatch {
            queue: queue.to_string(),
            configured: partitions,
            recorded: recorded.partitions,
        });
    }
    match flow_keys {
        Some(asked) if asked != recorded.flow_keys => Err(StorageError::FlowKeysMismatch {
            queue: queue.to_string(),
            configured: asked,
            recorded: recorded.flow_keys,
        }),
        _ => Ok(()),
    }
}

/// The per-key limits a store's claims apply, per queue (what `set_flow_limits` gave it: each
/// node's own configuration), shared by the backends that have flow keys.
#[derive(Debug, Default)]
pub(crate) struct FlowLimitsByQueue(
    parking_lot::RwLock<std::collections::HashMap<crate::model::QueueName, FlowLimits>>,
);

impl FlowLimitsByQueue {
    /// The limits of `queue`'s claims, when any is set.
    pub(crate) fn of(&self, queue: &crate::model::QueueName) -> Option<FlowLimits> {
        self.0
            .read()
            .get(queue)
            .copied()
            .filter(|limits| !limits.is_unlimited())
    }

    /// Keeps `limits` for `queue` after the checks of `set_flow_limits`: no zero limit, and
    /// flow keys on the queue (`flow_keys`: its recorded layout) when any limit is set.
    pub(crate) fn set(
        &self,
        queue: &crate::model::QueueName,
        limits: FlowLimits,
        flow_keys: bool,
    ) -> Result<(), StorageError> {
        limits.validate()?;
        if !limits.is_unlimited() && !flow_keys {
            return Err(StorageError::FlowKeysRequired {
                queue: queue.to_string(),
            });
        }
        self.0.write().insert(queue.clone(), limits);
        Ok(())
    }
}

/// A key's rate: at most `limit` fires in any `period_ms` (a sliding period: the fires of
/// the last `period_ms` milliseconds are counted, whatever the window boundaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyRate {
    /// The most fires per period (at least 1).
    pub limit: u32,
    /// The period in milliseconds (at least 1).
    pub period_ms: u64,
}

/// The per-key limits of a queue with flow keys, applied by every claim of the store that
/// was given them ([`TaskStore::set_flow_limits`](crate::TaskStore::set_flow_limits)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowLimits {
    /// `per_key_concurrency`: at most this many tasks of one key held at once.
    pub concurrency: Option<u32>,
    /// `per_key_rate`.
    pub rate: Option<KeyRate>,
    /// `per_key_order: fifo`: one task of a key at a time, in due order, held through its
    /// retries.
    pub fifo: bool,
}

impl FlowLimits {
    /// Whether no per-key limit is set (the claim then treats keyed ids as any other).
    pub fn is_unlimited(&self) -> bool {
        self.concurrency.is_none() && self.rate.is_none() && !self.fifo
    }

    /// The slots of one key: 1 with FIFO order, else `concurrency`.
    pub fn slots(&self) -> Option<u32> {
        if self.fifo {
            Some(1)
        } else {
            self.concurrency
        }
    }

    /// Checks the limits: a concurrency, a rate limit and a period of at least 1.
    pub fn validate(&self) -> Result<(), StorageError> {
        let invalid = |reason: &'static str| Err(StorageError::InvalidFlowLimits { reason });
        if self.concurrency == Some(0) {
            return invalid("per_key_concurrency must be at least 1");
        }
        if let Some(rate) = self.rate {
            if rate.limit == 0 {
                return invalid("per_key_rate must allow at least 1 fire per period");
            }
            if rate.period_ms == 0 {
                return invalid("per_key_rate's period must be at least 1 ms");
            }
        }
        Ok(())
    }
}

/// One key holding tasks back, as `delayq keys` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldKey {
    /// The flow key.
    pub key: String,
    /// Its tasks holding a slot (running, or with FIFO order waiting for a retry).
    pub running: u64,
    /// Its tasks held back (due, waiting for a slot or for the rate).
    pub waiting: u64,
    /// The earliest due among the held-back tasks: the longest wait.
    pub oldest_due_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_hash_tag_rule() {
        assert_eq!(flow_key_of("a{b}c"), Some("b"));
        assert_eq!(flow_key_of("{b}"), Some("b"));
        assert_eq!(flow_key_of("a{b}{c}"), Some("b"));
        assert_eq!(flow_key_of("a{{b}"), Some("{b"));
        assert_eq!(flow_key_of("a{}b{c}"), None);
        assert_eq!(flow_key_of("a{b"), None);
        assert_eq!(flow_key_of("a}b{"), None);
        assert_eq!(flow_key_of("é{ü}"), Some("ü"));
    }

    #[test]
    fn keyed_ids_of_one_key_share_a_partition() {
        let layout = QueueLayout {
            partitions: 64,
            flow_keys: true,
        };
        let first = TaskId::keyed("order", "customer-7", "1").expect("valid");
        let partition = layout.partition_of(&first);
        for n in 0..200 {
            let id = TaskId::keyed("x", "customer-7", &n.to_string()).expect("valid");
            assert_eq!(layout.partition_of(&id), partition);
        }
        // Pinned: changing it would misroute every deployed keyed queue.
        assert_eq!(
            partition,
            (stable_hash(b"customer-7") % 64) as u32,
            "the key alone decides"
        );
        let plain = TaskId::new("order-42").expect("valid");
        assert_eq!(
            layout.partition_of(&plain),
            crate::hash::partition_of(&plain, 64)
        );
        assert_eq!(
            QueueLayout::plain(64).partition_of(&first),
            crate::hash::partition_of(&first, 64)
        );
    }

    #[test]
    fn bad_keys_and_limits_are_named() {
        assert!(matches!(
            TaskId::keyed("a", "", "b"),
            Err(StorageError::InvalidFlowKey { .. })
        ));
        assert!(matches!(
            TaskId::keyed("a", "x}y", "b"),
            Err(StorageError::InvalidFlowKey { ref key, .. }) if key == "x}y"
        ));
        let zero = FlowLimits {
            concurrency: Some(0),
            ..FlowLimits::default()
        };
        assert!(zero.validate().is_err());
        let fifo = FlowLimits {
            fifo: true,
            concurrency: Some(5),
            ..FlowLimits::default()
        };
        assert_eq!(fifo.slots(), Some(1));
        assert!(FlowLimits::default().is_unlimited());
    }
}
