//! Reaching every master one by one: what a keyspace walk (`SCAN`) needs, since one
//! connection's `SCAN` on a Redis Cluster sees the keys of one master only.

use std::collections::BTreeMap;

use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, Value};

use crate::connection::RedisConnection;
use crate::error::{Error, Result};
use crate::topology::TopologyKind;

impl RedisConnection {
    /// One slot served by each master, in the order of the masters' addresses: on a Redis
    /// Cluster the first slot of each master's ranges in `CLUSTER SLOTS`; on one server or a
    /// Sentinel-watched master the single slot `0` (there is one master). Give the slots to
    /// [`query_at_slot`](Self::query_at_slot) to send a command to each master.
    ///
    /// The answer is a snapshot: a slot that moves to another master afterwards (resharding,
    /// a failover) makes the command go to the slot's new master, so a walk over the masters
    /// may see one master twice and miss one that gained slots meanwhile.
    pub async fn master_slots(&self) -> Result<Vec<u16>> {
        if self.kind() != TopologyKind::Cluster {
            return Ok(vec![0]);
        }
        let mut command = redis::cmd("CLUSTER");
        command.arg("SLOTS");
        let reply: Vec<Vec<Value>> = self.query("CLUSTER SLOTS", &command).await?;
        let unexpected = |what: &str| Error::Command {
            operation: "CLUSTER SLOTS",
            transient: false,
            code: None,
            message: format!("an unexpected reply: {what}"),
        };
        let mut first_slot: BTreeMap<String, u16> = BTreeMap::new();
        for range in reply {
            let (Some(start), Some(Value::Array(master))) = (range.first(), range.get(2)) else {
                return Err(unexpected("a range without a start or a master"));
            };
            let start: u16 = redis::from_redis_value_ref(start)
                .map_err(|_| unexpected("a start slot that is not a number"))?;
            let host: String = master
                .first()
                .map(redis::from_redis_value_ref)
                .transpose()
                .map_err(|_| unexpected("a master host that is not text"))?
                .unwrap_or_default();
            let port: u16 = master
                .get(1)
                .map(redis::from_redis_value_ref)
                .transpose()
                .map_err(|_| unexpected("a master port that is not a number"))?
                .unwrap_or_default();
            let entry = first_slot.entry(format!("{host}:{port}")).or_insert(start);
            *entry = (*entry).min(start);
        }
        Ok(first_slot.into_values().collect())
    }

    /// Sends `command` to the master serving `slot` on a cluster (see
    /// [`master_slots`](Self::master_slots)), to the one master otherwise. A slot beyond
    /// 16383 is an error.
    pub async fn query_at_slot<T: FromRedisValue>(
        &self,
        operation: &'static str,
        slot: u16,
        command: &Cmd,
    ) -> Result<T> {
        let Some(slot) = Slot::new(slot) else {
            return Err(Error::Command {
                operation,
                transient: false,
                code: None,
                message: format!("slot {slot} is out of range (0..=16383)"),
            });
        };
        let reply = self.send_at_slot(slot, command).await;
        reply
            .and_then(|value| value.extract_error())
            .and_then(|value| redis::from_redis_value(value).map_err(redis::RedisError::from))
            .map_err(|error| self.error(operation, &error))
    }
}
