//! The queue registry: `<prefix>:{cluster}:queues`, `HASH queue -> layout`.
//!
//! A layout is the partition count in decimal (`"16"`), followed by `";flow_keys"` for a
//! queue with flow keys (`"16;flow_keys"`): a release before flow keys reads such an entry
//! as a bad one and skips it (with a warning) instead of routing its keyed ids by the
//! whole id.
//!
//! It lives in the coordinator's `{cluster}` slot, so every key delayq writes carries a hash
//! tag. Releases before that kept it in `<prefix>:queues`; each process merges that old hash
//! into the new one once (`HSETNX`, so a count already recorded wins), before its first use of
//! the registry, and leaves it in place for nodes of the old release still running. The old
//! key has no hash tag: on a cluster it is read from whichever master serves its own slot
//! (the connection layer routes every command by its key).
//!
//! One bad entry (a name that is not a queue name, a count that is not a number in
//! `1..=65536`, both only writable by outside tooling) is logged once per process and skipped:
//! it never hides the other queues from nodes adopting queues or from `delayq stats`.

use std::collections::HashSet;

use delayq_redis::ScriptCall;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::error::{StorageError, StorageResult};
use crate::flow::{check_layout, QueueLayout};
use crate::model::QueueName;

use super::connection::RedisStore;
use super::keys::{legacy_registry_key, registry_key, registry_version_key};
use super::reply::bytes;
use super::scripts::SCRIPTS;

/// The most partitions a queue may have.
pub(crate) const MAX_PARTITIONS: u32 = 65_536;

/// What a store remembers about the registry: whether the legacy hash was merged, and which
/// bad entries were already reported.
#[derive(Debug, Default)]
pub(crate) struct RegistryState {
    migrated: OnceCell<()>,
    reported: Mutex<HashSet<Vec<u8>>>,
    /// The registry as last read, with the version counter read just before it.
    cached: Mutex<Option<CachedRegistry>>,
}

/// A read of the registry, reused while the version counter stays the same (and for at most
/// [`REGISTRY_MAX_AGE`]).
#[derive(Debug)]
struct CachedRegistry {
    version: Option<u64>,
    read_at: std::time::Instant,
    queues: Vec<(QueueName, QueueLayout)>,
}

/// The longest a cached read of the registry is reused although the version counter did not
/// move: a release before the counter registers queues without bumping it, and a register
/// whose reply was lost and that was retried finds its queue there already and bumps nothing.
const REGISTRY_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30);

impl RedisStore {
    pub(crate) async fn register(
        &self,
        queue: &QueueName,
        partitions: u32,
        flow_keys: Option<bool>,
    ) -> StorageResult<QueueLayout> {
        const OPERATION: &str = "register_queue";
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(StorageError::InvalidPartitionCount {
                queue: queue.to_string(),
                partitions,
            });
        }
        self.merge_legacy_registry().await?;
        let key = registry_key(&self.prefix);
        let version = registry_version_key(&self.prefix);
        // One script (HSETNX, INCR when it added, HGET): idempotent, so it may be retried as
        // a read, and a run whose reply was lost has bumped the version counter already, so
        // readers re-read the registry whichever attempt added the entry.
        let recorded: Option<Vec<u8>> = self
            .read(OPERATION, &key, |connection| {
                let call = ScriptCall::new(&SCRIPTS.register_queue)
                    .key(&key)
                    .key(&version)
                    .arg(queue.as_str())
                    .arg(encode_layout(&QueueLayout {
                        partitions,
                        flow_keys: flow_keys.unwrap_or(false),
                    }));
                async move { Ok(bytes(connection.run_script(&call).await?)) }
            })
            .await?;
        let recorded = parse_layout(&recorded.unwrap_or_default()).map_err(|reason| {
            StorageError::CorruptRecord {
                key: key.clone(),
                field: queue.to_string(),
                reason,
            }
        })?;
        check_layout(queue, &recorded, partitions, flow_keys)?;
        Ok(recorded)
    }

    pub(crate) async fn registered_queues(&self) -> StorageResult<Vec<(QueueName, QueueLayout)>> {
        self.merge_legacy_registry().await?;
        let key = registry_key(&self.prefix);
        // The registry is read again only when its version counter moved since the last
        // read (or that read is older than REGISTRY_MAX_AGE): one GET per call instead of the
        // whole registry, which every node reads every pull_period.
        let version_key = registry_version_key(&self.prefix);
        let version: Option<u64> = self
            .read("queues", &version_key, |connection| {
                let mut command = redis::cmd("GET");
                command.arg(&version_key);
                async move { connection.query("queues", &command).await }
            })
            .await?;
        if let Some(cached) = self.registry.cached.lock().as_ref() {
            if cached.version == version && cached.read_at.elapsed() < REGISTRY_MAX_AGE {
                return Ok(cached.queues.clone());
            }
        }
        let read_at = std::time::Instant::now();
        let entries = self.registry_entries(&key).await?;
        let mut queues = Vec::with_capacity(entries.len());
        for (name, count) in entries {
            match parse_entry(&name, &count) {
                Ok(entry) => queues.push(entry),
                Err(reason) => self.report_bad_entry(&key, name, &reason),
            }
        }
        queues.sort();
        *self.registry.cached.lock() = Some(CachedRegistry {
            version,
            read_at,
            queues: queues.clone(),
        });
        Ok(queues)
    }

    /// Bumps the registry's version counter after a change made here (a deleted queue).
    pub(crate) async fn bump_registry_version(&self) -> StorageResult<()> {
        let key = registry_version_key(&self.prefix);
        self.read_on(&self.producer, "delete_queue", &key, |connection| {
            let mut command = redis::cmd("INCR");
            command.arg(&key);
            async move { connection.query::<u64>("delete_queue", &command).await }
        })
        .await?;
        Ok(())
    }

    async fn registry_entries(&self, key: &str) -> StorageResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.read("queues", key, |connection| {
            let mut command = redis::cmd("HGETALL");
            command.arg(key);
            async move { connection.query("queues", &command).await }
        })
        .await
    }

    /// Copies the entries of the pre-`{cluster}` registry into the current one, once per
    /// process (retried on the next use if it failed).
    async fn merge_legacy_registry(&self) -> StorageResult<()> {
        self.registry
            .migrated
            .get_or_try_init(|| async {
                let legacy = legacy_registry_key(&self.prefix);
                let entries = self.registry_entries(&legacy).await?;
                if entries.is_empty() {
                    return Ok(());
                }
                let key = registry_key(&self.prefix);
                let mut pipe = redis::pipe();
                for (name, count) in &entries {
                    pipe.hset_nx(&key, name, count).ignore();
                }
                // HSETNX is idempotent: retried as a read.
                self.read("queues", &key, |connection| {
                    let pipe = pipe.clone();
                    async move { connection.query_pipeline::<()>("queues", &pipe).await }
                })
                .await?;
                tracing::info!(from = %legacy, to = %key, queues = entries.len(), "merged the queue registry of an earlier release");
                Ok(())
            })
            .await
            .map(|_| ())
    }

    fn report_bad_entry(&self, key: &str, name: Vec<u8>, reason: &str) {
        let shown = String::from_utf8_lossy(&name).into_owned();
        if self.registry.reported.lock().insert(name) {
            tracing::warn!(key, queue = %shown, reason, "skipping a bad entry of the queue registry");
        }
    }
}

/// One registry entry as a queue and its layout, or why it is not one.
fn parse_entry(name: &[u8], layout: &[u8]) -> Result<(QueueName, QueueLayout), String> {
    let name = std::str::from_utf8(name).map_err(|_| "the name is not UTF-8".to_owned())?;
    let queue = QueueName::new(name).map_err(|error| error.to_string())?;
    Ok((queue, parse_layout(layout)?))
}

/// A layout as the registry records it.
fn encode_layout(layout: &QueueLayout) -> String {
    if layout.flow_keys {
        format!("{}{FLOW_KEYS_SUFFIX}", layout.partitions)
    } else {
        layout.partitions.to_string()
    }
}

/// What follows the partition count of a queue with flow keys.
const FLOW_KEYS_SUFFIX: &str = ";flow_keys";

/// A recorded layout.
fn parse_layout(raw: &[u8]) -> Result<QueueLayout, String> {
    match raw.strip_suffix(FLOW_KEYS_SUFFIX.as_bytes()) {
        Some(count) => Ok(QueueLayout {
            partitions: parse_partitions(count)?,
            flow_keys: true,
        }),
        None => Ok(QueueLayout::plain(parse_partitions(raw)?)),
    }
}

/// A recorded partition count.
fn parse_partitions(raw: &[u8]) -> Result<u32, String> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|text| text.parse::<u32>().ok())
        .filter(|count| (1..=MAX_PARTITIONS).contains(count))
        .ok_or_else(|| {
            format!(
                "partition count {:?} is not a number in 1..=65536",
                String::from_utf8_lossy(raw)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::{encode_layout, parse_entry, parse_layout, parse_partitions};
    use crate::flow::QueueLayout;

    #[test]
    fn layouts_read_back_as_written() {
        for layout in [
            QueueLayout::plain(16),
            QueueLayout {
                partitions: 7,
                flow_keys: true,
            },
        ] {
            assert_eq!(parse_layout(encode_layout(&layout).as_bytes()), Ok(layout));
        }
        assert_eq!(encode_layout(&QueueLayout::plain(16)), "16");
        assert!(parse_layout(b"16;other").is_err());
    }

    #[test]
    fn entries_are_checked_field_by_field() {
        assert_eq!(parse_partitions(b"64"), Ok(64));
        assert!(parse_partitions(b"0").is_err());
        assert!(parse_partitions(b"65537").is_err());
        assert!(parse_partitions(b"x").is_err());
        assert!(parse_entry(b"bad:name", b"4").is_err());
        assert!(parse_entry(b"ok", b"4").is_ok());
    }
}
