//! Key and channel names of the coordinator: everything under `<prefix>:{cluster}:`, one hash
//! tag, so every membership script touches a single Redis Cluster slot.

/// The names one cluster uses.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    base: String,
    /// HASH node id -> JSON registry entry.
    pub(crate) registry: String,
    /// STRING: the membership epoch, bumped once per change.
    pub(crate) epoch: String,
    /// Pub/sub channel of membership announcements (payload: the new epoch).
    pub(crate) events: String,
    /// STRING with a TTL: present for one heartbeat TTL after a stall (a heartbeat found its
    /// own key expired while still registered); nobody is removed while it is.
    pub(crate) stall: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        let base = format!("{prefix}:{{cluster}}:");
        Keys {
            registry: format!("{base}registry"),
            epoch: format!("{base}epoch"),
            events: format!("{base}events"),
            stall: format!("{base}stall"),
            base,
        }
    }

    /// STRING with a TTL: present while `node` is alive.
    pub(crate) fn heartbeat(&self, node: &str) -> String {
        format!("{}hb:{node}", self.base)
    }

    /// Pub/sub channel of `node`'s wake-ups.
    pub(crate) fn wake_channel(&self, node: &str) -> String {
        format!("{}wake:{node}", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_shares_the_cluster_hash_tag() {
        let keys = Keys::new("dq");
        assert_eq!(keys.registry, "dq:{cluster}:registry");
        assert_eq!(keys.epoch, "dq:{cluster}:epoch");
        assert_eq!(keys.heartbeat("n1"), "dq:{cluster}:hb:n1");
        assert_eq!(keys.events, "dq:{cluster}:events");
        assert_eq!(keys.stall, "dq:{cluster}:stall");
        assert_eq!(keys.wake_channel("n1"), "dq:{cluster}:wake:n1");
    }
}
