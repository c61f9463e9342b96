//! The connection layer on a 3-master Redis Cluster: scripts routed by `KEYS[1]`'s slot,
//! `NOSCRIPT` repaired per master, a Functions library loaded on every master and again on
//! one that lost it (`FUNCTION FLUSH`), sharded pub/sub restored after a planned failover (a
//! server-sent `sunsubscribe`) and after a killed master's failover.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use delayq_redis::{LibraryBuilder, RedisConnection, Script, ScriptCall, Topology};
use delayq_testkit::RedisCluster;
use support::{options, publish_until_received};

const INCR: &str = "return redis.call('INCR', KEYS[1])";

fn evalsha_calls(cluster: &RedisCluster, port: u16) -> u64 {
    calls_of(cluster, port, "evalsha")
}

/// `calls=` of `cmdstat_<command>` on the node at `port`.
fn calls_of(cluster: &RedisCluster, port: u16, command: &str) -> u64 {
    delayq_testkit::command_calls(&cluster.info(port, "commandstats"), command)
}

fn counter_on(cluster: &RedisCluster, port: u16, key: &str) -> Option<i64> {
    // A direct, non-cluster connection: a key that is not on this node answers MOVED.
    redis::from_redis_value(cluster.command(port, &["GET", key]).ok()?).ok()
}

/// `flush` on the master of the first call's key, then that call alone, `flush` again and
/// all `calls` in one batch: each call (all increments, run once on its own key before) must
/// be applied exactly once more.
async fn flush_one_master_and_call_again(
    cluster: &RedisCluster,
    redis: &RedisConnection,
    calls: &[ScriptCall<'_>],
    flush: &[&str],
) {
    let keys: Vec<String> = (0..calls.len())
        .map(|p| format!("delayq:{{q:{p}}}:n"))
        .collect();
    let victim = cluster.master_of(&keys[0]);
    cluster.command(victim, flush).expect("flush");
    let reply = redis
        .run_script(&calls[0])
        .await
        .expect("a single call after the flush");
    assert_eq!(reply, redis::Value::Int(2));
    cluster.command(victim, flush).expect("flush");
    for result in redis.run_scripts(calls).await {
        let value = result.expect("batched calls survive a flush on one master");
        assert!(matches!(value, redis::Value::Int(2 | 3)), "{value:?}");
    }
    for key in &keys {
        let expected = if key == &keys[0] { 3 } else { 2 };
        let owner = cluster.master_of(key);
        assert_eq!(
            counter_on(cluster, owner, key),
            Some(expected),
            "{key}: applied once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_routed_by_slot_and_reloaded_after_script_flush() {
    let cluster = RedisCluster::start(0);
    let redis = RedisConnection::connect(options(Topology::cluster(cluster.seed_urls())))
        .await
        .expect("connect to the cluster");
    let script = Script::new(INCR);
    let keys: Vec<String> = (0..24).map(|p| format!("delayq:{{q:{p}}}:n")).collect();
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let before: HashMap<u16, u64> = masters
        .iter()
        .map(|&port| (port, evalsha_calls(&cluster, port)))
        .collect();

    let calls: Vec<ScriptCall<'_>> = keys
        .iter()
        .map(|key| ScriptCall::new(&script).key(key))
        .collect();
    for result in redis.run_scripts(&calls).await {
        assert_eq!(result.expect("a script call"), redis::Value::Int(1));
    }
    // Every key was incremented on the master the cluster says owns its slot.
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for key in &keys {
        let owner = cluster.master_of(key);
        assert_eq!(
            counter_on(&cluster, owner, key),
            Some(1),
            "{key} on {owner}"
        );
        *per_master.entry(owner).or_default() += 1;
    }
    assert_eq!(
        per_master.len(),
        3,
        "24 hash tags should cover 3 masters: {per_master:?}"
    );
    for &port in &masters {
        let calls = evalsha_calls(&cluster, port) - before[&port];
        assert!(calls >= 1, "master {port} ran no EVALSHA");
    }

    // One master loses its scripts: single and batched calls load them again there.
    flush_one_master_and_call_again(&cluster, &redis, &calls, &["SCRIPT", "FLUSH"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_library_is_loaded_on_every_master_and_again_after_function_flush() {
    let cluster = RedisCluster::start(0);
    let redis = RedisConnection::connect(options(Topology::cluster(cluster.seed_urls())))
        .await
        .expect("connect to the cluster");
    let mut builder = LibraryBuilder::new("test", &[]);
    builder.function("incr", &[], INCR);
    let (library, scripts) = builder.build();
    redis.load_library(&library).await.expect("FUNCTION LOAD");
    let masters = cluster.masters();
    for &port in &masters {
        let listed = format!("{:?}", cluster.command(port, &["FUNCTION", "LIST"]));
        assert!(listed.contains(library.name()), "master {port}: {listed}");
    }
    let keys: Vec<String> = (0..24).map(|p| format!("delayq:{{q:{p}}}:n")).collect();
    let calls: Vec<ScriptCall<'_>> = keys
        .iter()
        .map(|key| ScriptCall::new(&scripts[0]).key(key))
        .collect();
    for result in redis.run_scripts(&calls).await {
        assert_eq!(result.expect("an FCALL"), redis::Value::Int(1));
    }
    for &port in &masters {
        assert!(
            calls_of(&cluster, port, "fcall") >= 1,
            "master {port} ran no FCALL"
        );
        assert_eq!(evalsha_calls(&cluster, port), 0, "master {port}");
    }

    // One master loses the library: single and batched calls load it there again.
    flush_one_master_and_call_again(&cluster, &redis, &calls, &["FUNCTION", "FLUSH"]).await;
    assert!(redis.uses_functions());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_pubsub_and_scripts_survive_planned_and_forced_failovers() {
    let mut cluster = RedisCluster::start(1);
    let redis = RedisConnection::connect(options(Topology::cluster(cluster.seed_urls())))
        .await
        .expect("connect to the cluster");
    let planned = "delayq:{q:5}:wake";
    let old = cluster.master_of(planned);
    let replica = *cluster
        .replicas_of(old)
        .first()
        .unwrap_or_else(|| panic!("the channel's master has a replica: {:?}", cluster.nodes()));
    // A channel (and script key) on another master, for the forced failover.
    let tag = (0..64)
        .map(|p| format!("{{q:{p}}}"))
        .find(|tag| ![old, replica].contains(&cluster.master_of(tag)))
        .expect("a hash tag on another master");
    let forced = format!("delayq:{tag}:wake");
    let key = format!("delayq:{tag}:n");
    let script = Script::new(INCR);
    redis
        .run_script(&ScriptCall::new(&script).key(&key))
        .await
        .expect("a script call");

    let mut subscriber = redis.subscriber().await.expect("a subscriber");
    subscriber.subscribe(planned).await.expect("SSUBSCRIBE");
    subscriber.subscribe(&forced).await.expect("SSUBSCRIBE");
    for channel in [planned, forced.as_str()] {
        let took = publish_until_received(
            &redis,
            &mut subscriber,
            channel,
            b"first",
            Duration::from_secs(5),
        )
        .await;
        assert!(
            took.is_some(),
            "no sharded message on {channel} before any failover"
        );
        let owner = cluster.master_of(channel);
        assert_subscribed_once(&cluster, owner, channel, "subscribed before any failover").await;
    }

    // Planned failover: the old master loses the slot and sends `sunsubscribe` to us.
    cluster
        .command(replica, &["CLUSTER", "FAILOVER"])
        .expect("CLUSTER FAILOVER");
    let new = tokio::task::block_in_place(|| {
        cluster.wait_for_failover(planned, old, Duration::from_secs(20))
    });
    assert_eq!(new, replica);
    let (took, restored) = publish_until_received(
        &redis,
        &mut subscriber,
        planned,
        b"after-planned",
        Duration::from_secs(15),
    )
    .await
    .unwrap_or_else(|| {
        panic!(
            "subscription not restored after a planned failover\n{}",
            cluster.logs()
        )
    });
    eprintln!("sharded subscription restored {took:?} after the planned failover");
    assert!(
        restored.contains(&planned.to_owned()),
        "the consumer is told messages may be missing"
    );
    assert_subscribed_once(
        &cluster,
        new,
        planned,
        "subscribed in the new master's shard",
    )
    .await;

    // Forced failover: SIGKILL the master; its replica takes over, without our scripts.
    let killed = cluster.kill_master_of(&forced);
    let started = Instant::now();
    let promoted = tokio::task::block_in_place(|| {
        cluster.wait_for_failover(&forced, killed, Duration::from_secs(30))
    });
    eprintln!(
        "cluster failed over to {promoted} in {:?}",
        started.elapsed()
    );
    let reply = support::eventually(Duration::from_secs(15), || async {
        redis
            .run_script(&ScriptCall::new(&script).key(&key))
            .await
            .ok()
    })
    .await
    .unwrap_or_else(|| panic!("no script call on the new master\n{}", cluster.logs()));
    assert!(matches!(reply, redis::Value::Int(_)), "{reply:?}");
    let (took, restored) = publish_until_received(
        &redis,
        &mut subscriber,
        &forced,
        b"after-kill",
        Duration::from_secs(15),
    )
    .await
    .unwrap_or_else(|| {
        panic!(
            "subscription not restored after the master was killed\n{}",
            cluster.logs()
        )
    });
    eprintln!("sharded subscription restored {took:?} after the forced failover");
    assert_subscribed_once(
        &cluster,
        promoted,
        &forced,
        "subscribed in the promoted replica's shard",
    )
    .await;
    let mut told = restored.contains(&forced);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !told && Instant::now() < deadline {
        if let Ok(Some(delayq_redis::PubSubEvent::Resubscribed { channels })) =
            tokio::time::timeout(Duration::from_millis(200), subscriber.next_event()).await
        {
            told = channels.contains(&forced);
        }
    }
    assert!(told, "the consumer is told messages may be missing");
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// Waits (a shard's replicas become known by gossip) until exactly one subscription to
/// `channel` is in the shard of the master at `port`.
async fn assert_subscribed_once(cluster: &RedisCluster, port: u16, channel: &str, what: &str) {
    let once = support::eventually(Duration::from_secs(5), || async {
        (shard_subscribers(cluster, port, channel) == 1).then_some(())
    })
    .await;
    assert!(
        once.is_some(),
        "{what}: {} subscriptions",
        shard_subscribers(cluster, port, channel)
    );
}

/// `PUBSUB SHARDNUMSUB <channel>` summed over the master at `port` and its replicas (Redis 7
/// serves sharded subscriptions on a shard's replicas too, fed by replication).
fn shard_subscribers(cluster: &RedisCluster, port: u16, channel: &str) -> i64 {
    let mut nodes = cluster.replicas_of(port);
    nodes.push(port);
    nodes
        .into_iter()
        .map(|node| {
            let reply = cluster
                .command(node, &["PUBSUB", "SHARDNUMSUB", channel])
                .expect("PUBSUB SHARDNUMSUB");
            let (_, count): (String, i64) =
                redis::from_redis_value(reply).expect("channel and count");
            count
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_one_replica_is_still_met_after_a_failover_with_two_replicas_per_master() {
    let mut cluster = RedisCluster::start(2);
    let redis = RedisConnection::connect(options(Topology::cluster(cluster.seed_urls())))
        .await
        .expect("connect to the cluster");
    let key = "delayq:{q:9}:k";
    let set = |value: &'static str| {
        let mut command = redis::cmd("SET");
        command.arg(key).arg(value);
        command
    };
    let _: () = redis.query("SET", &set("a")).await.expect("SET");
    assert_eq!(
        redis
            .wait_replicas(key, 2, Duration::from_millis(1000))
            .await
            .ok(),
        Some(2)
    );
    let killed = cluster.kill_master_of(key);
    let promoted = tokio::task::block_in_place(|| {
        cluster.wait_for_failover(key, killed, Duration::from_secs(30))
    });
    // The surviving replica re-attaches to the promoted one (seen once gossip spreads).
    let attached = support::eventually(Duration::from_secs(10), || async {
        (cluster.replicas_of(promoted).len() == 1).then_some(())
    })
    .await;
    assert!(attached.is_some(), "{:?}", cluster.nodes());
    let confirmed = support::eventually(Duration::from_secs(15), || async {
        redis.query::<()>("SET", &set("b")).await.ok()?;
        redis
            .wait_replicas(key, 1, Duration::from_millis(500))
            .await
            .ok()
    })
    .await;
    assert_eq!(
        confirmed,
        Some(1),
        "no replica confirmed after the failover\n{}",
        cluster.logs()
    );
    let value: Option<String> =
        redis::from_redis_value(cluster.command(promoted, &["GET", key]).expect("GET"))
            .expect("a value");
    assert_eq!(value.as_deref(), Some("b"));
}
