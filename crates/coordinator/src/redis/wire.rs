//! What the coordinator stores and sends: registry entries (JSON), script replies, wake-ups.

use serde::{Deserialize, Serialize};

use crate::api::{Member, Membership, NodeId, NodeInfo, QueueFilter};
use crate::error::{CoordinatorError, CoordinatorResult};

/// One registry entry, the value of `registry[node id]`. Unknown fields are ignored, so a
/// later release can add some.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RegistryEntry {
    pub(crate) name: String,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) version: String,
    pub(crate) started_ms: u64,
    pub(crate) last_heartbeat_ms: u64,
    /// `None`: every queue.
    #[serde(default)]
    pub(crate) queues: Option<Vec<String>>,
}

impl RegistryEntry {
    #[cfg(test)]
    pub(crate) fn from_info(info: &NodeInfo) -> Self {
        RegistryEntry {
            name: info.name.clone(),
            host: info.host.clone(),
            pid: info.pid,
            version: info.version.clone(),
            started_ms: info.started_ms,
            last_heartbeat_ms: info.last_heartbeat_ms,
            queues: match &info.queues {
                QueueFilter::All => None,
                QueueFilter::Only(queues) => Some(queues.clone()),
            },
        }
    }

    pub(crate) fn to_json(&self) -> String {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    fn into_info(self, id: NodeId) -> NodeInfo {
        NodeInfo {
            id,
            name: self.name,
            host: self.host,
            pid: self.pid,
            version: self.version,
            started_ms: self.started_ms,
            last_heartbeat_ms: self.last_heartbeat_ms,
            queues: match self.queues {
                None => QueueFilter::All,
                Some(queues) => QueueFilter::only(queues),
            },
        }
    }
}

/// Decodes one registry entry.
pub(crate) fn decode_entry(id: &str, json: &str) -> CoordinatorResult<NodeInfo> {
    serde_json::from_str::<RegistryEntry>(json)
        .map(|entry| entry.into_info(NodeId::from_string(id)))
        .map_err(|error| CoordinatorError::CorruptEntry {
            node: id.to_owned(),
            reason: error.to_string(),
        })
}

/// Decodes a whole registry (HGETALL pairs), sorted by id; fails on the first corrupt entry.
pub(crate) fn decode_registry(pairs: &[(String, String)]) -> CoordinatorResult<Vec<NodeInfo>> {
    let mut nodes = pairs
        .iter()
        .map(|(id, json)| decode_entry(id, json))
        .collect::<CoordinatorResult<Vec<_>>>()?;
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(nodes)
}

/// The reply every membership script gives (see `lua/prelude.lua`).
#[derive(Debug, Clone)]
pub(crate) struct ScriptReply {
    /// Redis `TIME`, in microseconds.
    pub(crate) server_us: u64,
    pub(crate) epoch: u64,
    /// This node was not registered and the script added it.
    pub(crate) added: bool,
    /// Members the script removed.
    pub(crate) removed: Vec<String>,
    /// The registry after the script, as (id, JSON) pairs; `None` when the script did not
    /// read it (the caller already held `epoch`).
    pub(crate) registry: Option<Vec<(String, String)>>,
    /// The ids of the registered members without a heartbeat deadline (nodes of the
    /// previous release, checked by their `hb:<id>` key); empty when the registry was not
    /// read.
    pub(crate) without_deadline: Vec<String>,
    /// The heartbeat found this node's own heartbeat expired while it was still registered,
    /// or a long gap since its previous one (a stall of Redis or of this node, a failover):
    /// it removed nobody.
    pub(crate) stalled: bool,
}

/// The raw shape of a script reply, as redis-rs converts it.
pub(crate) type RawReply = (
    u64,
    u64,
    u64,
    u8,
    Vec<String>,
    Vec<String>,
    u8,
    u8,
    Vec<String>,
);

impl ScriptReply {
    pub(crate) fn from_raw(raw: RawReply) -> Self {
        let (seconds, micros, epoch, added, removed, flat, stalled, read, without_deadline) = raw;
        let registry = (read == 1).then(|| {
            let mut registry = Vec::with_capacity(flat.len() / 2);
            let mut fields = flat.into_iter();
            while let (Some(id), Some(json)) = (fields.next(), fields.next()) {
                registry.push((id, json));
            }
            registry
        });
        ScriptReply {
            server_us: seconds.saturating_mul(1_000_000) + micros,
            epoch,
            added: added == 1,
            removed,
            registry,
            without_deadline,
            stalled: stalled == 1,
        }
    }

    /// The membership this reply describes, `None` when it did not read the registry.
    /// Corrupt entries are left out (every node reads the same bytes, so every node leaves
    /// out the same ones) and handed to `on_corrupt`.
    pub(crate) fn membership(
        &self,
        mut on_corrupt: impl FnMut(CoordinatorError),
    ) -> Option<Membership> {
        let registry = self.registry.as_ref()?;
        let mut members: Vec<Member> = registry
            .iter()
            .filter_map(|(id, json)| match decode_entry(id, json) {
                Ok(info) => Some(info.member()),
                Err(error) => {
                    on_corrupt(error);
                    None
                }
            })
            .collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));
        Some(Membership {
            epoch: self.epoch,
            members,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_entries_round_trip_and_corruption_is_named() {
        let info = NodeInfo {
            id: NodeId::from_string("n1"),
            name: "api-1".to_owned(),
            host: "h".to_owned(),
            pid: 42,
            version: "0.1.0".to_owned(),
            started_ms: 1,
            last_heartbeat_ms: 2,
            queues: QueueFilter::Only(vec!["a".to_owned(), "b".to_owned()]),
        };
        let json = RegistryEntry::from_info(&info).to_json();
        assert_eq!(decode_entry("n1", &json).expect("decodes"), info);
        match decode_entry("n2", "{nope") {
            Err(CoordinatorError::CorruptEntry { node, .. }) => assert_eq!(node, "n2"),
            other => panic!("expected CorruptEntry, got {other:?}"),
        }
    }

    #[test]
    fn replies_pair_the_registry_and_sort_members() {
        let entry = |name: &str| {
            RegistryEntry {
                name: name.to_owned(),
                host: "h".to_owned(),
                pid: 1,
                version: "v".to_owned(),
                started_ms: 0,
                last_heartbeat_ms: 0,
                queues: None,
            }
            .to_json()
        };
        let reply = ScriptReply::from_raw((
            1_700_000_000,
            250_999,
            7,
            0,
            vec![],
            vec![
                "b".to_owned(),
                entry("b"),
                "x".to_owned(),
                "{corrupt".to_owned(),
                "a".to_owned(),
                entry("a"),
            ],
            0,
            1,
            vec!["x".to_owned()],
        ));
        assert_eq!(reply.server_us / 1_000, 1_700_000_000_250);
        assert_eq!(reply.without_deadline, ["x"]);
        let mut corrupt = Vec::new();
        let membership = reply
            .membership(|error| corrupt.push(error))
            .expect("the registry was read");
        assert_eq!(membership.epoch, 7);
        let ids: Vec<&str> = membership.members.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(corrupt.len(), 1);
    }

    #[test]
    fn a_reply_that_did_not_read_the_registry_describes_no_membership() {
        let reply = ScriptReply::from_raw((1, 0, 7, 0, vec![], vec![], 0, 0, vec![]));
        assert_eq!(reply.epoch, 7);
        assert!(reply.registry.is_none());
        assert!(reply.membership(|_| {}).is_none());
        // An empty registry that was read is an empty membership, not "unknown".
        let reply = ScriptReply::from_raw((1, 0, 7, 0, vec![], vec![], 0, 1, vec![]));
        assert_eq!(reply.membership(|_| {}).map(|m| m.members.len()), Some(0));
    }
}
