//! The Redis backend on a Sentinel-watched master (master, two replicas, three sentinels):
//! schedules and claims keep going across a planned `SENTINEL FAILOVER` within seconds, what
//! was acknowledged after the switch is on the new master, and nothing reaches the demoted
//! one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_redis::{ConnectOptions, Timeouts, Topology};
use delayq_storage::{
    NewTask, Partition, QueueName, RedisStore, RedisStoreOptions, ScheduleMode, StoreOptions,
    TaskId, TaskStore,
};
use delayq_testkit::SentinelSet;

const T0: u64 = 1_700_000_000_000;
const PARTITIONS: u32 = 4;

fn partition(index: u32) -> Partition {
    Partition::new(QueueName::new("orders").expect("valid queue"), index)
}

/// Schedules `t-0`, `t-1`, ... (due in the past) until `stop`; returns each acknowledged
/// id with the time of its acknowledgement.
async fn produce(store: RedisStore, stop: Arc<AtomicBool>) -> Vec<(String, Instant)> {
    let mut acked = Vec::new();
    let mut next = 0u32;
    while !stop.load(Ordering::SeqCst) {
        let name = format!("t-{next}");
        let task = NewTask {
            id: TaskId::new(&name).expect("valid id"),
            due_ms: T0,
            payload: Bytes::from_static(b"p"),
            traceparent: None,
        };
        if store
            .schedule(&partition(next % PARTITIONS), task, ScheduleMode::Upsert)
            .await
            .is_ok()
        {
            acked.push((name, Instant::now()));
        }
        next += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    acked
}

/// Claims and acks due tasks of every partition until `stop`; returns each claimed id with
/// the time of its claim.
async fn fire(store: RedisStore, stop: Arc<AtomicBool>) -> Vec<(String, Instant)> {
    let mut fired = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        for index in 0..PARTITIONS {
            let Ok(batch) = store
                .claim_due(&partition(index), T0, 100, T0 + 60_000, "node")
                .await
            else {
                continue;
            };
            let at = Instant::now();
            for task in batch.tasks {
                let _ = store.ack(&task.token).await;
                fired.push((task.id.to_string(), at));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fired
}

/// Script calls (`FCALL` and `EVALSHA`: run, refused) of the data node at `port`.
fn script_calls(set: &SentinelSet, port: u16) -> (u64, u64) {
    let info: String = set
        .command(port, &["INFO", "commandstats"])
        .ok()
        .and_then(|value| redis::from_redis_value(value).ok())
        .unwrap_or_default();
    let field = |command: &str, name: &str| -> u64 {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|stats| {
                stats
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            })
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    let both = |name: &str| field("fcall", name) + field("evalsha", name);
    (both("calls"), both("rejected_calls"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_and_claims_go_on_across_a_planned_failover_and_none_reach_the_demoted_master() {
    let set = Arc::new(
        tokio::task::spawn_blocking(SentinelSet::start)
            .await
            .expect("start the sentinel set"),
    );
    let redis = ConnectOptions::new(Topology::sentinel(set.sentinel_urls(), set.master_name()))
        .with_timeouts(Timeouts {
            connect: Duration::from_millis(500),
            response: Duration::from_secs(2),
            start: Duration::from_secs(10),
            failover: Duration::from_secs(15),
        });
    let store = RedisStore::connect(RedisStoreOptions {
        redis,
        key_prefix: "sentinel".to_owned(),
        store: StoreOptions::default(),
        wait_replicas: None,
    })
    .await
    .expect("connect through the sentinels");
    let queue = QueueName::new("orders").expect("valid queue");
    store
        .register_queue(&queue, PARTITIONS)
        .await
        .expect("register");
    let old = set.master_port();

    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(store.clone(), stop.clone()));
    let firing = tokio::spawn(fire(store.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let failing_over = set.clone();
    let new = tokio::task::spawn_blocking(move || failing_over.failover())
        .await
        .expect("SENTINEL FAILOVER");
    // `failover` returns once the old master serves as a replica of the new one.
    let switched = Instant::now();
    let demoted_calls = script_calls(&set, old);
    eprintln!(
        "planned failover {old} -> {new} took {:?}",
        switched - asked
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, Ordering::SeqCst);
    let acked = producer.await.expect("the producer");
    let fired = firing.await.expect("the firing loop");

    // Both kept going within seconds.
    let longest_gap = |times: Vec<Instant>| {
        times
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or_default()
    };
    let schedule_gap = longest_gap(acked.iter().map(|(_, at)| *at).collect());
    let mut claim_times: Vec<Instant> = fired.iter().map(|(_, at)| *at).collect();
    claim_times.dedup();
    let claim_gap = longest_gap(claim_times);
    eprintln!(
        "{} schedules, {} fired; longest pause: schedules {schedule_gap:?}, claims {claim_gap:?}",
        acked.len(),
        fired.len()
    );
    assert!(
        acked.iter().any(|(_, at)| *at > switched),
        "no schedule after the switch"
    );
    assert!(
        fired.iter().any(|(_, at)| *at > switched),
        "no claim after the switch"
    );
    assert!(
        schedule_gap < Duration::from_secs(5),
        "schedules stalled {schedule_gap:?}"
    );
    assert!(
        claim_gap < Duration::from_secs(5),
        "claims stalled {claim_gap:?}"
    );

    // Nothing was sent to the demoted master once it was demoted.
    assert_eq!(set.role(old).as_deref(), Some("slave"));
    assert_eq!(
        script_calls(&set, old),
        demoted_calls,
        "script calls reached the demoted master"
    );

    // Every schedule acknowledged after the switch fires (it is on the new master); at most
    // the writes in flight as the promotion began can be lost.
    let mut seen: HashSet<String> = fired.into_iter().map(|(id, _)| id).collect();
    for index in 0..PARTITIONS {
        let batch = store
            .claim_due(&partition(index), T0, 100_000, T0 + 60_000, "node")
            .await
            .expect("claim after the failover");
        seen.extend(batch.tasks.into_iter().map(|task| task.id.to_string()));
    }
    let lost_after: Vec<&String> = acked
        .iter()
        .filter(|(id, at)| *at > switched && !seen.contains(id))
        .map(|(id, _)| id)
        .collect();
    assert!(
        lost_after.is_empty(),
        "acknowledged after the switch but never fired: {lost_after:?}\n{}",
        set.logs()
    );
    let lost = acked.iter().filter(|(id, _)| !seen.contains(id)).count();
    eprintln!("{lost} acknowledged schedules lost in the failover");
    assert!(
        lost <= 5,
        "{lost} acknowledged schedules lost\n{}",
        set.logs()
    );
}
