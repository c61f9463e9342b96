//! Flow keys on Redis: the per-key limits each queue's claims apply (kept in the process, as
//! the node's own configuration) and the listing of the keys holding tasks back. The state
//! itself lives in four keys of each partition (see `flow.lua`).

use crate::error::{StorageError, StorageResult};
use crate::flow::{flow_key_of, FlowLimits, HeldKey};
use crate::model::{Partition, QueueName};

use super::connection::RedisStore;

/// The claim's four arguments for `limits`: slots, rate, period ms, FIFO (see
/// `claim_due.lua`).
pub(crate) fn claim_args(limits: Option<&FlowLimits>) -> [u64; 4] {
    let Some(limits) = limits else {
        return [0; 4];
    };
    [
        limits.slots().map_or(0, u64::from),
        limits.rate.map_or(0, |rate| u64::from(rate.limit)),
        limits.rate.map_or(0, |rate| rate.period_ms),
        u64::from(limits.fifo),
    ]
}

/// The most parked keys a listing walks before it sorts them by their waiting tasks.
const LISTING_WALK: usize = 1_000;

impl RedisStore {
    pub(crate) async fn keep_flow_limits(
        &self,
        queue: &QueueName,
        limits: FlowLimits,
    ) -> StorageResult<()> {
        // The registry is read only when some limit is set (it needs flow keys then).
        let flow_keys = !limits.is_unlimited()
            && self
                .registered_queues()
                .await?
                .into_iter()
                .any(|(name, layout)| &name == queue && layout.flow_keys);
        self.flow_limits.set(queue, limits, flow_keys)
    }

    /// Walks the parked set key by key (one `ZRANGEBYLEX` each, up to [`LISTING_WALK`]
    /// keys), then counts every key's waiting tasks and reads its holds in one pipeline.
    pub(crate) async fn read_held_keys(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<HeldKey>> {
        const OPERATION: &str = "held_keys";
        let keys = self.keys(partition);
        let mut found: Vec<(String, u64)> = Vec::new();
        let mut from = "-".to_owned();
        while found.len() < LISTING_WALK {
            let first: Vec<Vec<u8>> = self
                .read(OPERATION, &keys.parked, |connection| {
                    let mut command = redis::cmd("ZRANGEBYLEX");
                    command
                        .arg(&keys.parked)
                        .arg(&from)
                        .arg("+")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(1);
                    async move { connection.query(OPERATION, &command).await }
                })
                .await?;
            let Some(member) = first.into_iter().next() else {
                break;
            };
            let Some((key, at)) = parse_member(&member) else {
                return Err(StorageError::CorruptRecord {
                    key: keys.parked.clone(),
                    field: String::from_utf8_lossy(&member).into_owned(),
                    reason: "not a parked entry (key NUL time NUL id)".to_owned(),
                });
            };
            from = format!("({key}\u{1}");
            found.push((key, at));
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        // Every key's waiting count and holds in one pipeline.
        let counts: Vec<Option<u64>> = self
            .read(OPERATION, &keys.parked, |connection| {
                let mut pipe = redis::pipe();
                for (key, _) in &found {
                    pipe.cmd("ZLEXCOUNT")
                        .arg(&keys.parked)
                        .arg(format!("[{key}\0"))
                        .arg(format!("({key}\u{1}"))
                        .hget(&keys.flow, format!("r{key}"));
                }
                async move { connection.query_pipeline(OPERATION, &pipe).await }
            })
            .await?;
        if counts.len() != 2 * found.len() {
            return Err(super::error_map::unexpected_reply(
                OPERATION,
                "not two counts per key",
            ));
        }
        let mut held: Vec<HeldKey> = found
            .into_iter()
            .zip(counts.chunks(2))
            .map(|((key, oldest_due_ms), pair)| HeldKey {
                key,
                running: pair[1].unwrap_or(0),
                waiting: pair[0].unwrap_or(0),
                oldest_due_ms,
            })
            .collect();
        held.sort_by(|a, b| b.waiting.cmp(&a.waiting).then_with(|| a.key.cmp(&b.key)));
        held.truncate(limit);
        Ok(held)
    }
}

/// A parked entry `key NUL time NUL id` as its key and time.
fn parse_member(member: &[u8]) -> Option<(String, u64)> {
    let text = std::str::from_utf8(member).ok()?;
    let mut parts = text.splitn(3, '\0');
    let key = parts.next()?;
    let at = parts.next()?.parse().ok()?;
    let id = parts.next()?;
    (flow_key_of(id) == Some(key)).then(|| (key.to_owned(), at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_entries_parse_back() {
        assert_eq!(
            parse_member(b"host-1\x00000000000000042\x00evt:{host-1}:9"),
            Some(("host-1".to_owned(), 42))
        );
        assert_eq!(parse_member(b"host-1\x000042\x00evt:{other}:9"), None);
        assert_eq!(parse_member(b"garbage"), None);
    }
}
