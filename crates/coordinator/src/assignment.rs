//! Partition assignment by rendezvous (highest-random-weight) hashing.
//!
//! Each `(queue, partition)` goes to the member with the highest
//! `xxh3_64("<queue>\0<partition>\0<node id>")` among the members that serve the queue. Every
//! node computes the same owner from the same member list, and when a member joins or leaves
//! only the partitions it wins or held move (about 1/N of them).

use crate::api::{Member, NodeId};

fn weight(queue: &str, partition: u32, node: &NodeId) -> u64 {
    let mut key = Vec::with_capacity(queue.len() + node.as_str().len() + 16);
    key.extend_from_slice(queue.as_bytes());
    key.push(0);
    key.extend_from_slice(partition.to_string().as_bytes());
    key.push(0);
    key.extend_from_slice(node.as_str().as_bytes());
    xxhash_rust::xxh3::xxh3_64(&key)
}

/// The member that owns `(queue, partition)`, or `None` when no member serves the queue.
pub fn owner<'a>(queue: &str, partition: u32, members: &'a [Member]) -> Option<&'a NodeId> {
    members
        .iter()
        .filter(|member| member.queues.serves(queue))
        .max_by(|a, b| {
            weight(queue, partition, &a.id)
                .cmp(&weight(queue, partition, &b.id))
                .then_with(|| b.id.cmp(&a.id))
        })
        .map(|member| &member.id)
}

/// The partitions of `queue` (with `partitions` partitions) that `node` owns.
pub fn owned_partitions(
    node: &NodeId,
    queue: &str,
    partitions: u32,
    members: &[Member],
) -> Vec<u32> {
    (0..partitions)
        .filter(|&partition| owner(queue, partition, members) == Some(node))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_reference_xxh3() {
        // XXH3_64bits("") from the reference implementation.
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2d06_8005_38d3_94c2);
    }

    #[test]
    fn weights_are_pinned() {
        // If these change, every cluster reassigns every partition on upgrade: don't.
        let cases = [
            ("orders", 0, "node-a", 8_891_031_731_931_756_914),
            ("orders", 7, "node-b", 10_180_380_704_302_882_674),
            (
                "device-offline",
                63,
                "3f2a9c1e-0000-4000-8000-000000000001",
                15_179_430_509_394_831_683,
            ),
        ];
        for (queue, partition, node, expected) in cases {
            assert_eq!(
                weight(queue, partition, &NodeId::from_string(node)),
                expected,
                "{queue}/{partition}/{node}"
            );
        }
    }
}
