//! `WAIT`: a write confirmed by replicas before it is acknowledged.

use std::time::Duration;

use redis::cluster_routing::Slot;

use crate::connection::RedisConnection;
use crate::error::{Error, Result};

impl RedisConnection {
    /// After a write to `key`, waits until `replicas` replicas of its master acknowledged
    /// every write made so far on this connection, for at most `timeout` (`WAIT replicas
    /// timeout`). Returns how many did; fewer than `replicas` is
    /// [`Error::ReplicasNotConfirmed`], returned once `timeout` has passed.
    ///
    /// The write itself stays on the master either way: `WAIT` cannot undo it, only say that
    /// a failover might lose it. `replicas == 0` returns at once. `timeout` must be shorter
    /// than [`crate::Timeouts::response`], or the answer would be cut off.
    pub async fn wait_replicas(&self, key: &str, replicas: u32, timeout: Duration) -> Result<u32> {
        if replicas == 0 {
            return Ok(0);
        }
        let response = self.shared.options.timeouts.response;
        if timeout.is_zero() || timeout >= response {
            return Err(Error::InvalidConfig {
                field: "redis.wait_timeout",
                value: format!("{timeout:?}"),
                reason: format!("must be above zero and below the response timeout ({response:?})"),
            });
        }
        let mut command = redis::cmd("WAIT");
        command.arg(replicas).arg(timeout.as_millis() as u64);
        let reply = self.send_at_slot(Slot::for_key(key), &command).await;
        let confirmed: i64 = reply
            .and_then(|value| value.extract_error())
            .and_then(|value| redis::from_redis_value(value).map_err(redis::RedisError::from))
            .map_err(|error| self.error("WAIT", &error))?;
        let confirmed = u32::try_from(confirmed).unwrap_or(0);
        if confirmed < replicas {
            tracing::warn!(
                key,
                wanted = replicas,
                confirmed,
                "write not confirmed by enough replicas"
            );
            return Err(Error::ReplicasNotConfirmed {
                wanted: replicas,
                confirmed,
                timeout_ms: timeout.as_millis() as u64,
            });
        }
        Ok(confirmed)
    }
}
