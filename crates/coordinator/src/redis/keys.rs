//! Key and channel names of the coordinator.
//!
//! The membership lives under `<prefix>:{cluster}:`, one hash tag, so every membership script
//! touches a single Redis Cluster slot. A partition's wake-ups travel on a channel in the
//! partition's own slot, `<prefix>:{<queue>:<partition>}:wake` (the hash tag of the storage
//! keys of that partition), so on a cluster they are published and heard on the master that
//! serves the partition (sharded pub/sub), not all on one.

/// The names one cluster uses.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
    base: String,
    /// HASH node id -> JSON registry entry.
    pub(crate) registry: String,
    /// STRING: the membership epoch, bumped once per change.
    pub(crate) epoch: String,
    /// Pub/sub channel of membership announcements (payload: the new epoch).
    pub(crate) events: String,
    /// STRING with a TTL: present for one heartbeat TTL after a stall (a heartbeat found its
    /// own key expired while still registered, or a long gap since its previous one); nobody
    /// is removed while it is.
    pub(crate) stall: String,
    /// ZSET node id -> heartbeat deadline (ms on the server's `TIME`): a heartbeat finds
    /// the dead at its low end, without a command per member.
    pub(crate) deadlines: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        let base = format!("{prefix}:{{cluster}}:");
        Keys {
            prefix: prefix.to_owned(),
            registry: format!("{base}registry"),
            epoch: format!("{base}epoch"),
            events: format!("{base}events"),
            stall: format!("{base}stall"),
            deadlines: format!("{base}deadlines"),
            base,
        }
    }

    /// STRING with a TTL: present while `node` is alive. This release finds the dead by
    /// [`Keys::deadlines`], but keeps setting this key for the previous release, which
    /// checks it for every member; it checks it in turn for members without a deadline
    /// (nodes of the previous release).
    pub(crate) fn heartbeat(&self, node: &str) -> String {
        format!("{}hb:{node}", self.base)
    }

    /// Pub/sub channel of the wake-ups of one partition, in the partition's slot.
    pub(crate) fn partition_wake_channel(&self, queue: &str, partition: u32) -> String {
        format!("{}:{{{queue}:{partition}}}:wake", self.prefix)
    }

    /// Pub/sub channel of `node` itself: wake-ups for a partition nobody listens to yet (a
    /// queue created a moment ago, an ownership change under way) are sent to the owner the
    /// membership names, here.
    pub(crate) fn node_wake_channel(&self, node: &str) -> String {
        format!("{}wake:{node}", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_keys_share_the_cluster_hash_tag_and_wakeups_the_partitions() {
        let keys = Keys::new("dq");
        assert_eq!(keys.registry, "dq:{cluster}:registry");
        assert_eq!(keys.epoch, "dq:{cluster}:epoch");
        assert_eq!(keys.heartbeat("n1"), "dq:{cluster}:hb:n1");
        assert_eq!(keys.events, "dq:{cluster}:events");
        assert_eq!(keys.stall, "dq:{cluster}:stall");
        assert_eq!(keys.deadlines, "dq:{cluster}:deadlines");
        assert_eq!(keys.node_wake_channel("n1"), "dq:{cluster}:wake:n1");
        // The storage keys of this partition are `dq:{orders:7}:due`, ...: the same slot.
        assert_eq!(
            keys.partition_wake_channel("orders", 7),
            "dq:{orders:7}:wake"
        );
    }
}
