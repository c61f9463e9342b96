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
    //! The heartbeat script's removal and read rules, called directly on a real server.

    use delayq_redis::redis::{self, Value};
    use delayq_redis::{ConnectOptions, RedisConnection, ScriptCall, Topology};
    use delayq_testkit::RedisServer;

    use super::HEARTBEAT;
    use crate::redis::keys::Keys;
    use crate::redis::wire::{RawReply, ScriptReply};

    const TTL_MS: u64 = 1_000;
    const STALL_GAP_MS: u64 = 900;

    async fn connect(server: &RedisServer) -> RedisConnection {
        RedisConnection::connect(ConnectOptions::new(Topology::standalone(server.url())))
            .await
            .expect("connect")
    }

    async fn server_ms(redis: &RedisConnection) -> u64 {
        let (seconds, micros): (u64, u64) = redis
            .query("TIME", &redis::cmd("TIME"))
            .await
            .expect("TIME");
        seconds * 1_000 + micros / 1_000
    }

    /// One heartbeat call of the script.
    struct Beat<'a> {
        node: &'a str,
        /// Server time of this node's previous heartbeat (0: none).
        previous_ms: u64,
        /// The epoch the caller holds (`None`: none, read the registry).
        held: Option<u64>,
        /// Members checked by their `hb:<id>` key (no deadline: the previous release).
        legacy: &'a [&'a str],
        /// The most passed deadlines examined.
        limit: u32,
    }

    impl<'a> Beat<'a> {
        fn new(node: &'a str) -> Self {
            Beat {
                node,
                previous_ms: 0,
                held: None,
                legacy: &[],
                limit: 64,
            }
        }

        async fn run(&self, redis: &RedisConnection) -> ScriptReply {
            let keys = Keys::new("t");
            let node = self.node;
            let mut call = ScriptCall::new(&HEARTBEAT)
                .key(&keys.registry)
                .key(&keys.epoch)
                .key(keys.heartbeat(node))
                .key(&keys.stall)
                .key(&keys.deadlines);
            for other in self.legacy {
                call = call.key(keys.heartbeat(other));
            }
            call = call
                .arg(node)
                .arg(format!(r#"{{"name":"{node}","host":"h","pid":1,"version":"v","started_ms":0,"last_heartbeat_ms":0}}"#))
                .arg(TTL_MS)
                .arg(0)
                .arg(&keys.events)
                .arg("PUBLISH")
                .arg(self.previous_ms)
                .arg(STALL_GAP_MS)
                .arg(self.held.map(|e| e.to_string()).unwrap_or_default())
                .arg(self.limit);
            for other in self.legacy {
                call = call.arg(*other);
            }
            let value: Value = redis.run_script(&call).await.expect("heartbeat script");
            let raw: RawReply = redis::from_redis_value(value).expect("a script reply");
            ScriptReply::from_raw(raw)
        }
    }

    /// Lets `node`'s heartbeat expire: its deadline passes, its `hb:<id>` key goes.
    async fn expire(redis: &RedisConnection, node: &str) {
        let keys = Keys::new("t");
        let _: i64 = redis
            .query(
                "ZADD",
                redis::cmd("ZADD").arg(&keys.deadlines).arg(1).arg(node),
            )
            .await
            .expect("ZADD");
        let _: i64 = redis
            .query("DEL", redis::cmd("DEL").arg(keys.heartbeat(node)))
            .await
            .expect("DEL");
    }

    async fn delete(redis: &RedisConnection, key: &str) {
        let _: i64 = redis
            .query("DEL", redis::cmd("DEL").arg(key))
            .await
            .expect("DEL");
    }

    #[tokio::test]
    async fn a_long_gap_since_the_previous_heartbeat_removes_nobody_for_one_ttl() {
        let server = RedisServer::start();
        let redis = connect(&server).await;
        let keys = Keys::new("t");
        assert!(Beat::new("a").run(&redis).await.added);
        assert!(Beat::new("b").run(&redis).await.added);

        // b's heartbeat expired while a's did not; a beat 100 ms ago: b is dead.
        expire(&redis, "b").await;
        let now = server_ms(&redis).await;
        let reply = Beat {
            previous_ms: now - 100,
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert_eq!(
            (reply.stalled, reply.removed),
            (false, vec!["b".to_owned()])
        );

        // The same, but a could not beat for 2 s (a failover): its own deadline survived,
        // b's did not — it ran out just now, during a's silence — and b may only have been
        // cut off like a. Nobody is removed for one TTL.
        assert!(Beat::new("b").run(&redis).await.added);
        expire(&redis, "b").await;
        let now = server_ms(&redis).await;
        let _: i64 = redis
            .query(
                "ZADD",
                redis::cmd("ZADD")
                    .arg(&keys.deadlines)
                    .arg(now.saturating_sub(1))
                    .arg("b"),
            )
            .await
            .expect("ZADD");
        let reply = Beat {
            previous_ms: now - 2_000,
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert!(reply.stalled);
        assert!(reply.removed.is_empty());
        // The next heartbeat, right after, respects the marker as well.
        let now = server_ms(&redis).await;
        let reply = Beat {
            previous_ms: now,
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert!(reply.removed.is_empty());
        // Once the marker is gone (one TTL later), a silent b is removed.
        delete(&redis, &keys.stall).await;
        let now = server_ms(&redis).await;
        let reply = Beat {
            previous_ms: now - 100,
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert_eq!(reply.removed, vec!["b".to_owned()]);
        // A gap just below the threshold is not a stall.
        let now = server_ms(&redis).await;
        let reply = Beat {
            previous_ms: now - (STALL_GAP_MS - 100),
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert!(!reply.stalled);
    }

    #[tokio::test]
    async fn its_own_deadline_passed_while_registered_is_a_stall() {
        let server = RedisServer::start();
        let redis = connect(&server).await;
        Beat::new("a").run(&redis).await;
        Beat::new("b").run(&redis).await;
        // Everybody's deadline passed at once (Redis stood still).
        expire(&redis, "a").await;
        expire(&redis, "b").await;
        let reply = Beat::new("a").run(&redis).await;
        assert!(reply.stalled && !reply.added);
        assert!(reply.removed.is_empty(), "{reply:?}");
        // b gets its TTL to beat again, and is not a stall itself: a's beat set the marker.
        let reply = Beat::new("b").run(&redis).await;
        assert!(reply.removed.is_empty(), "{reply:?}");
    }

    #[tokio::test]
    async fn the_registry_is_read_only_when_the_callers_epoch_is_not_current() {
        let server = RedisServer::start();
        let redis = connect(&server).await;
        let joined = Beat::new("a").run(&redis).await;
        assert!(joined.added);
        assert_eq!(joined.registry.as_ref().map(Vec::len), Some(1));
        let epoch = joined.epoch;
        // Holding the current epoch: no registry in the reply.
        let idle = Beat {
            held: Some(epoch),
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert_eq!((idle.epoch, idle.registry.is_none()), (epoch, true));
        // b joins: a's next heartbeat, holding the old epoch, reads the registry once.
        Beat::new("b").run(&redis).await;
        let changed = Beat {
            held: Some(epoch),
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert_eq!(changed.epoch, epoch + 1);
        let members = changed.membership(|_| {}).expect("read").members;
        assert_eq!(members.len(), 2);
        // Both registered members have a deadline: nobody to check by `hb:<id>`.
        assert!(changed.without_deadline.is_empty());
    }

    #[tokio::test]
    async fn passed_deadlines_are_removed_a_bounded_number_per_call_with_one_bump_each() {
        let server = RedisServer::start();
        let redis = connect(&server).await;
        Beat::new("a").run(&redis).await;
        let dead = ["d1", "d2", "d3", "d4", "d5"];
        let mut before = 0;
        for node in dead {
            before = Beat::new(node).run(&redis).await.epoch;
        }
        for node in dead {
            expire(&redis, node).await;
        }
        // A node of the previous release removed d5 from the registry only.
        let keys = Keys::new("t");
        let _: i64 = redis
            .query("HDEL", redis::cmd("HDEL").arg(&keys.registry).arg("d5"))
            .await
            .expect("HDEL");
        let limited = |held| Beat {
            held: Some(held),
            limit: 2,
            ..Beat::new("a")
        };
        let mut removed = Vec::new();
        let mut epoch = before;
        for _ in 0..3 {
            let reply = limited(epoch).run(&redis).await;
            assert!(reply.removed.len() <= 2);
            if !reply.removed.is_empty() {
                assert_eq!(reply.epoch, epoch + 1, "one bump per call");
            }
            epoch = reply.epoch;
            removed.extend(reply.removed);
        }
        removed.sort();
        assert_eq!(removed, ["d1", "d2", "d3", "d4"], "d5 was gone already");
        let left: Vec<String> = redis
            .query(
                "ZRANGE",
                redis::cmd("ZRANGE").arg(&keys.deadlines).arg(0).arg(-1),
            )
            .await
            .expect("ZRANGE");
        assert_eq!(left, ["a"], "the passed deadlines are dropped");
    }

    #[tokio::test]
    async fn a_member_without_a_deadline_is_named_and_checked_by_its_heartbeat_key() {
        let server = RedisServer::start();
        let redis = connect(&server).await;
        let keys = Keys::new("t");
        Beat::new("a").run(&redis).await;
        // A node of the previous release: registry entry and `hb:<id>` key, no deadline.
        let old = r#"{"name":"old","host":"h","pid":1,"version":"0.0.9","started_ms":0,"last_heartbeat_ms":0}"#;
        let _: i64 = redis
            .query(
                "HSET",
                redis::cmd("HSET").arg(&keys.registry).arg("old").arg(old),
            )
            .await
            .expect("HSET");
        let _: () = redis
            .query(
                "SET",
                redis::cmd("SET")
                    .arg(keys.heartbeat("old"))
                    .arg(1)
                    .arg("PX")
                    .arg(60_000),
            )
            .await
            .expect("SET");
        let reply = Beat::new("a").run(&redis).await;
        assert_eq!(reply.without_deadline, ["old"]);
        // Alive: checking its key removes nothing.
        let reply = Beat {
            legacy: &["old"],
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert!(reply.removed.is_empty());
        // Its key expired: removed, as the previous release would have.
        delete(&redis, &keys.heartbeat("old")).await;
        let reply = Beat {
            legacy: &["old"],
            ..Beat::new("a")
        }
        .run(&redis)
        .await;
        assert_eq!(reply.removed, ["old"]);
        assert!(reply.without_deadline.is_empty());
    }
}
