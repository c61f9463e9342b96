//! The stable hash that maps task ids to partitions.
//!
//! XXH3-64 with seed 0 over the id's UTF-8 bytes: specified byte for byte, identical on
//! every platform and release, and fast on short keys. Never Rust's randomly seeded
//! `DefaultHasher`. The test vectors below pin it: changing them breaks every deployed queue.

use crate::model::TaskId;

/// The 64-bit stable hash of `bytes`.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The partition of `id` in a queue of `partitions` partitions: `stable_hash(id) % partitions`.
///
/// # Panics
/// When `partitions` is 0.
pub fn partition_of(id: &TaskId, partitions: u32) -> u32 {
    assert!(partitions > 0, "a queue has at least one partition");
    (stable_hash(id.as_str().as_bytes()) % u64::from(partitions)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_is_pinned() {
        // Fixed vectors: if one of these changes, tasks written by an older release would be
        // looked up in the wrong partition.
        assert_eq!(stable_hash(b""), 0x2d06800538d394c2);
        assert_eq!(stable_hash(b"a"), 0xe6c632b61e964e1f);
        assert_eq!(stable_hash(b"order-42"), PINNED_ORDER_42);
        let id = TaskId::new("order-42").expect("valid id");
        assert_eq!(partition_of(&id, 64), PINNED_ORDER_42_OF_64);
        let device = TaskId::new("device-7").expect("valid id");
        assert_eq!(partition_of(&device, 64), PINNED_DEVICE_7_OF_64);
        assert_eq!(partition_of(&device, 1), 0);
    }

    const PINNED_ORDER_42: u64 = 0x79cc_a591_0b9a_ce3c;
    const PINNED_ORDER_42_OF_64: u32 = 60;
    const PINNED_DEVICE_7_OF_64: u32 = 22;

    #[test]
    fn ids_spread_over_partitions() {
        let mut counts = [0u32; 64];
        for n in 0..64_000 {
            let id = TaskId::new(format!("task-{n}")).expect("valid id");
            counts[partition_of(&id, 64) as usize] += 1;
        }
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(min >= Some(&800) && max <= Some(&1200), "{counts:?}");
    }
}
