//! The membership scripts (`lua/*.lua`, each with its KEYS/ARGV contract on top), compiled
//! once with the shared prelude prepended. They run on the master of the `{cluster}` slot
//! (their `KEYS[1]`), and are loaded again wherever a master lost them.

use std::sync::LazyLock;

use delayq_redis::Script;

const PRELUDE: &str = include_str!("lua/prelude.lua");

fn with_prelude(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// Registers or refreshes this node and removes dead members (also used to join).
pub(crate) static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| with_prelude(include_str!("lua/heartbeat.lua")));

/// Removes this node at once.
pub(crate) static LEAVE: LazyLock<Script> =
    LazyLock::new(|| with_prelude(include_str!("lua/leave.lua")));

/// Reads epoch, registry and time together; writes nothing.
pub(crate) static SNAPSHOT: LazyLock<Script> =
    LazyLock::new(|| with_prelude(include_str!("lua/snapshot.lua")));

#[cfg(test)]
mod tests {
    //! The heartbeat script's removal rules, called directly on a real server.

    use delayq_redis::redis::{self, Value};
    use delayq_redis::{ConnectOptions, RedisConnection, ScriptCall, Topology};
    use delayq_testkit::RedisServer;

    use super::HEARTBEAT;
    use crate::redis::keys::Keys;
    use crate::redis::wire::{RawReply, ScriptReply};

    const TTL_MS: u64 = 1_000;
    const STALL_GAP_MS: u64 = 900;

    async fn server_ms(redis: &RedisConnection) -> u64 {
        let (seconds, micros): (u64, u64) = redis
            .query("TIME", &redis::cmd("TIME"))
            .await
            .expect("TIME");
        seconds * 1_000 + micros / 1_000
    }

    /// One heartbeat of `node` that checks `others`, with its previous one at `previous_ms`.
    async fn beat(
        redis: &RedisConnection,
        node: &str,
        others: &[&str],
        previous_ms: u64,
    ) -> ScriptReply {
        let keys = Keys::new("t");
        let mut call = ScriptCall::new(&HEARTBEAT)
            .key(&keys.registry)
            .key(&keys.epoch)
            .key(keys.heartbeat(node))
            .key(&keys.stall);
        for other in others {
            call = call.key(keys.heartbeat(other));
        }
        call = call
            .arg(node)
            .arg(format!(r#"{{"name":"{node}","host":"h","pid":1,"version":"v","started_ms":0,"last_heartbeat_ms":0}}"#))
            .arg(TTL_MS)
            .arg(0)
            .arg(&keys.events)
            .arg("PUBLISH")
            .arg(previous_ms)
            .arg(STALL_GAP_MS);
        for other in others {
            call = call.arg(*other);
        }
        let value: Value = redis.run_script(&call).await.expect("heartbeat script");
        let raw: RawReply = redis::from_redis_value(value).expect("a script reply");
        ScriptReply::from_raw(raw)
    }

    async fn expire(redis: &RedisConnection, key: &str) {
        let _: i64 = redis
            .query("DEL", redis::cmd("DEL").arg(key))
            .await
            .expect("DEL");
    }

    #[tokio::test]
    async fn a_long_gap_since_the_previous_heartbeat_removes_nobody_for_one_ttl() {
        let server = RedisServer::start();
        let redis =
            RedisConnection::connect(ConnectOptions::new(Topology::standalone(server.url())))
                .await
                .expect("connect");
        let keys = Keys::new("t");
        assert!(beat(&redis, "a", &[], 0).await.added);
        assert!(beat(&redis, "b", &[], 0).await.added);

        // b's heartbeat expired while a's did not; a beat 100 ms ago: b is dead.
        expire(&redis, &keys.heartbeat("b")).await;
        let now = server_ms(&redis).await;
        let reply = beat(&redis, "a", &["b"], now - 100).await;
        assert_eq!(
            (reply.stalled, reply.removed),
            (false, vec!["b".to_owned()])
        );

        // The same, but a could not beat for 2 s (a failover): its own key survived, b's
        // did not, and b may only have been cut off like a. Nobody is removed for one TTL.
        assert!(beat(&redis, "b", &[], 0).await.added);
        expire(&redis, &keys.heartbeat("b")).await;
        let now = server_ms(&redis).await;
        let reply = beat(&redis, "a", &["b"], now - 2_000).await;
        assert!(reply.stalled);
        assert!(reply.removed.is_empty());
        // The next heartbeat, right after, respects the marker as well.
        let now = server_ms(&redis).await;
        assert!(beat(&redis, "a", &["b"], now).await.removed.is_empty());
        // Once the marker is gone (one TTL later), a silent b is removed.
        expire(&redis, &keys.stall).await;
        let now = server_ms(&redis).await;
        let reply = beat(&redis, "a", &["b"], now - 100).await;
        assert_eq!(reply.removed, vec!["b".to_owned()]);
        // A gap just below the threshold is not a stall.
        let now = server_ms(&redis).await;
        assert!(
            !beat(&redis, "a", &[], now - (STALL_GAP_MS - 100))
                .await
                .stalled
        );
    }
}
