//! Deleting a whole queue (`delayq queue delete`): every key of the queue on every master,
//! then its registry entries.
//!
//! 1. **Partitions by name.** For each partition `0..partitions`, `drop_partition.lua` counts
//!    the pending, in-flight and dead tasks and unlinks `due`, `tasks`, `inflight`, `done`,
//!    `dead`, `claim`, `ticks` and `paused` in one script (one slot), so the count is exactly
//!    what that script removed. The calls go out concurrently (at most
//!    [`DROP_CONCURRENCY`]), each to its partition's master, on the producers' connection.
//! 2. **The sweep.** `SCAN <prefix>:{<queue>:*` on every master (one connection's `SCAN` sees
//!    one master of a Redis Cluster only; see `RedisConnection::master_slots`) finds whatever
//!    else carries the queue's tag: keys of a partition beyond the count, a key an older or
//!    newer release added. The `:` right after the name keeps `orders-eu` out of a sweep of
//!    `orders`; queue names are `[A-Za-z0-9_.-]`, so only the prefix can hold glob characters,
//!    and those are escaped. Keys found under a partition tag `{<queue>:<n>}` go through
//!    `drop_partition.lua` together (their tasks are counted); any other key is unlinked alone.
//! 3. **Registry.** The queue's entries in `<prefix>:{cluster}:queues`, `<prefix>:{cluster}:paused`
//!    and the legacy `<prefix>:queues` are removed last, so a node never stops serving a
//!    queue whose tasks are still there.
//!
//! Every step is idempotent and retried like a read after a transient failure; a partition
//! whose first call ran but whose reply was lost is counted as 0 by the retry (its tasks are
//! gone either way). Keys are unlinked (`UNLINK`): a large partition is freed in the
//! background, not while Redis holds every other client.
//!
//! Concurrent writers are not fenced: a schedule that lands in a partition after that
//! partition's drop leaves its task behind without a registry entry (its producer had the
//! partition count cached), or re-creates the registry entry (it registered the queue anew).

use std::collections::BTreeMap;

use delayq_redis::ScriptCall;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::error::StorageResult;
use crate::model::{Partition, QueueName};

use super::connection::RedisStore;
use super::keys::{legacy_registry_key, paused_key, registry_key};
use super::reply::expect_number;
use super::scripts::SCRIPTS;

/// Partition drops (and stray keys) in flight at once.
const DROP_CONCURRENCY: usize = 16;

/// Keys asked of `SCAN` per step.
const SCAN_COUNT: usize = 1_000;

const OPERATION: &str = "delete_queue";

impl RedisStore {
    pub(crate) async fn drop_queue(
        &self,
        queue: &QueueName,
        partitions: u32,
    ) -> StorageResult<u64> {
        let by_name: Vec<u64> = stream::iter(0..partitions)
            .map(|index| {
                let keys = self.keys(&Partition::new(queue.clone(), index));
                async move {
                    let others = [
                        keys.tasks.into_bytes(),
                        keys.done.into_bytes(),
                        keys.receipt.into_bytes(),
                        keys.ticks.into_bytes(),
                        keys.paused.into_bytes(),
                        keys.traces.into_bytes(),
                        keys.flow.into_bytes(),
                        keys.fires.into_bytes(),
                        keys.fire_times.into_bytes(),
                    ];
                    let counted = [keys.due, keys.inflight, keys.dead, keys.parked];
                    self.drop_partition(&counted, &others).await
                }
            })
            .buffer_unordered(DROP_CONCURRENCY)
            .try_collect()
            .await?;
        let mut removed: u64 = by_name.iter().sum();
        removed += self.sweep(queue).await?;
        self.unregister(queue).await?;
        Ok(removed)
    }

    /// Runs `drop_partition.lua` on the three task sets and `others` (all of one slot).
    /// `counted`: the partition's due, inflight, dead and parked sets, whose members are the
    /// tasks removed.
    async fn drop_partition(
        &self,
        counted: &[String; 4],
        others: &[Vec<u8>],
    ) -> StorageResult<u64> {
        self.read_on(&self.producer, OPERATION, &counted[0], |connection| {
            let mut call = ScriptCall::new(&SCRIPTS.drop_partition);
            for key in counted {
                call = call.key(key);
            }
            for key in others {
                call = call.key(key.as_slice());
            }
            async move { connection.run_script(&call).await }
        })
        .await
        .and_then(|reply| expect_number(OPERATION, &reply, "the removed count"))
    }

    /// Finds and deletes every other key with the queue's tag on every master; returns the
    /// tasks those keys held.
    async fn sweep(&self, queue: &QueueName) -> StorageResult<u64> {
        let head = format!("{}:{{{}:", self.prefix, queue);
        let pattern = format!("{}*", escape_glob(&head));
        let slots = self
            .read_on(&self.producer, OPERATION, &head, |connection| async move {
                connection.master_slots().await
            })
            .await?;
        let mut found: Vec<Vec<u8>> = Vec::new();
        for slot in slots {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
                let (next, keys): (u64, Vec<Vec<u8>>) = self
                    .read_on(&self.producer, OPERATION, &head, |connection| {
                        let scan = scan.clone();
                        async move { connection.query_at_slot("SCAN", slot, &scan).await }
                    })
                    .await?;
                found.extend(keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        if found.is_empty() {
            return Ok(0);
        }
        tracing::debug!(%queue, keys = found.len(), "deleting keys of the queue beyond its partitions' names");
        // Group by tag: the keys of one tag share a slot and go into one script call.
        let mut by_tag: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        for key in found {
            let tag = tag_of(&key, head.len()).to_vec();
            by_tag.entry(tag).or_default().push(key);
        }
        let counts: Vec<u64> = stream::iter(by_tag)
            .map(|(tag, keys)| async move {
                let index = std::str::from_utf8(&tag)
                    .ok()
                    .and_then(|text| text.parse::<u32>().ok());
                match index {
                    Some(index) => {
                        let named = self.keys(&Partition::new(queue.clone(), index));
                        let counted = [named.due, named.inflight, named.dead, named.parked];
                        self.drop_partition(&counted, &keys).await
                    }
                    // Not a partition: no tasks to count; the keys still share their tag.
                    None => {
                        let first = String::from_utf8_lossy(&keys[0]).into_owned();
                        let mut unlink = redis::cmd("UNLINK");
                        unlink.arg(&keys);
                        self.read_on(&self.producer, OPERATION, &first, |connection| {
                            let unlink = unlink.clone();
                            async move { connection.query::<u64>("UNLINK", &unlink).await }
                        })
                        .await
                        .map(|_| 0)
                    }
                }
            })
            .buffer_unordered(DROP_CONCURRENCY)
            .try_collect()
            .await
            .map_err(|error| {
                tracing::warn!(%queue, %error, "sweeping the queue's keys failed");
                error
            })?;
        Ok(counts.iter().sum())
    }

    /// Removes the queue's entries from the registry, the paused set and the legacy registry.
    async fn unregister(&self, queue: &QueueName) -> StorageResult<()> {
        for key in [
            paused_key(&self.prefix),
            registry_key(&self.prefix),
            legacy_registry_key(&self.prefix),
        ] {
            self.read_on(&self.producer, OPERATION, &key, |connection| {
                let mut command = redis::cmd("HDEL");
                command.arg(&key).arg(queue.as_str());
                async move { connection.query::<u64>("HDEL", &command).await }
            })
            .await?;
        }
        self.bump_registry_version().await
    }
}

/// The part of `key` after the queue's tag head (`<prefix>:{<queue>:`, `head_len` bytes) up
/// to the closing `}`: the partition index of a partition key.
fn tag_of(key: &[u8], head_len: usize) -> &[u8] {
    let rest = key.get(head_len..).unwrap_or_default();
    let close = rest.iter().position(|&b| b == b'}').unwrap_or(rest.len());
    &rest[..close]
}

/// `text` with the characters that Redis glob patterns treat specially (`*`, `?`, `[`, `]`,
/// `\`) escaped by a backslash, so it matches only itself.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::{escape_glob, tag_of};

    #[test]
    fn glob_characters_of_the_prefix_are_escaped() {
        assert_eq!(escape_glob("delayq:{orders:"), "delayq:{orders:");
        assert_eq!(escape_glob("a*b?[c]\\:{q:"), "a\\*b\\?\\[c\\]\\\\:{q:");
    }

    #[test]
    fn the_tag_after_the_queue_name_is_the_partition() {
        let head = "delayq:{orders:";
        assert_eq!(tag_of(b"delayq:{orders:7}:due", head.len()), b"7");
        assert_eq!(tag_of(b"delayq:{orders:x}:extra", head.len()), b"x");
        assert_eq!(tag_of(b"delayq:{orders:", head.len()), b"");
    }
}
