//! On a single master, concurrent claims, acks and single schedules of different partitions
//! share script calls (issue 18: most of a call's Redis cost is the call itself). Each caller
//! still gets its own partition's answer: its tasks only, its pause, its dead letters, its
//! token's verdict, and every task is claimed and completed exactly once.

use std::collections::HashSet;

use bytes::Bytes;
use delayq_storage::{
    AckOutcome, LeaseToken, NewTask, Partition, QueueName, RedisStore, RedisStoreOptions,
    ScheduleMode, ScheduleOutcome, StorageError, StoreOptions, TaskId, TaskStore,
};
use delayq_testkit::RedisServer;
use futures::future::join_all;

const T0: u64 = 1_700_000_000_000;
const PARTITIONS: u32 = 16;
const PER_PARTITION: usize = 40;

/// A store that uses Functions (`functions`) or the EVALSHA scripts, with `max_claim_bytes`.
async fn start(functions: bool, max_claim_bytes: usize) -> (RedisServer, RedisStore) {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let mut options = RedisStoreOptions {
        key_prefix: "shared".to_owned(),
        store: StoreOptions {
            max_claim_bytes,
            ..StoreOptions::default()
        },
        ..RedisStoreOptions::standalone(server.url())
    };
    options.redis = options.redis.with_functions(functions);
    let store = RedisStore::connect(options).await.expect("connect");
    (server, store)
}

/// Script calls (`FCALL` and `EVALSHA`) the server ran so far.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = redis::from_redis_value(
        server
            .command(&["INFO", "commandstats"])
            .expect("INFO commandstats"),
    )
    .expect("INFO text");
    ["fcall", "evalsha"]
        .iter()
        .map(|command| delayq_testkit::command_calls(&info, command))
        .sum()
}

fn id(partition: u32, n: usize) -> TaskId {
    TaskId::new(format!("p{partition}-t{n:03}")).expect("id")
}

/// Schedules `PER_PARTITION` tasks in each partition, all with single concurrent `schedule`s.
async fn schedule_everything(store: &RedisStore, partitions: &[Partition]) {
    let schedules = partitions.iter().flat_map(|partition| {
        (0..PER_PARTITION).map(move |n| {
            let task = NewTask {
                id: id(partition.index, n),
                due_ms: T0 + n as u64,
                payload: Bytes::from(format!("payload of {n} in {}", partition.index)),
                traceparent: None,
            };
            store.schedule(partition, task, ScheduleMode::Upsert)
        })
    });
    for outcome in join_all(schedules).await {
        assert_eq!(outcome.expect("schedule"), ScheduleOutcome::Created);
    }
}

/// Every partition claims concurrently, round after round, until nothing is left; returns
/// the tokens, checking that each partition's batch holds its own tasks only.
async fn claim_everything(store: &RedisStore, partitions: &[Partition]) -> Vec<LeaseToken> {
    let mut tokens = Vec::new();
    loop {
        let claims = partitions
            .iter()
            .map(|partition| store.claim_due(partition, T0 + 1_000, 7, T0 + 600_000, "node"));
        let batches = join_all(claims).await;
        let mut claimed = 0;
        for (partition, batch) in partitions.iter().zip(batches) {
            let batch = batch.expect("claim");
            assert!(!batch.paused);
            for task in batch.tasks {
                assert_eq!(&task.token.partition, partition, "another partition's task");
                assert!(
                    task.token
                        .id
                        .as_str()
                        .starts_with(&format!("p{}-", partition.index)),
                    "{} claimed in {partition}",
                    task.token.id
                );
                tokens.push(task.token);
                claimed += 1;
            }
        }
        if claimed == 0 {
            return tokens;
        }
    }
}

async fn calls_are_shared_and_answers_stay_per_partition(functions: bool) {
    let (server, store) = start(functions, 8 * 1024 * 1024).await;
    let queue = QueueName::new("q").expect("queue");
    store
        .register_queue(&queue, PARTITIONS)
        .await
        .expect("register");
    let partitions: Vec<Partition> = (0..PARTITIONS)
        .map(|index| Partition::new(queue.clone(), index))
        .collect();

    let before = script_calls(&server);
    schedule_everything(&store, &partitions).await;
    let schedule_calls = script_calls(&server) - before;
    let scheduled = PARTITIONS as u64 * PER_PARTITION as u64;
    // Per partition, at least one call each; shared, a handful.
    assert!(
        schedule_calls < u64::from(PARTITIONS),
        "{scheduled} concurrent schedules of {PARTITIONS} partitions took {schedule_calls} calls"
    );

    let before = script_calls(&server);
    let tokens = claim_everything(&store, &partitions).await;
    let claim_calls = script_calls(&server) - before;
    let ids: HashSet<&str> = tokens.iter().map(|token| token.id.as_str()).collect();
    assert_eq!(ids.len(), tokens.len(), "a task was claimed twice");
    assert_eq!(tokens.len() as u64, scheduled, "every task claimed");
    // 6 rounds of 16 concurrent claims (and a last, empty one).
    assert!(
        claim_calls < 7 * u64::from(PARTITIONS) / 2,
        "claims took {claim_calls} calls"
    );

    // One token loses its lease meanwhile (claimed again after a requeue): among concurrent
    // acks of every partition, only it is refused.
    let stale = tokens[3].clone();
    let requeued = store
        .requeue_expired(&stale.partition, T0 + 600_001, 100)
        .await
        .expect("requeue");
    assert!(requeued.contains(&stale.id), "{requeued:?}");
    let again = store
        .claim_due(&stale.partition, T0 + 600_001, 100, T0 + 900_000, "node")
        .await
        .expect("claim again");
    let before = script_calls(&server);
    let acks = join_all(tokens.iter().map(|token| store.ack(token))).await;
    let ack_calls = script_calls(&server) - before;
    for (token, outcome) in tokens.iter().zip(acks) {
        if token.partition == stale.partition {
            // The whole partition was requeued and claimed again: all of its old tokens are
            // stale now.
            assert!(
                matches!(outcome, Err(StorageError::StaleLease { .. })),
                "{}: {outcome:?}",
                token.id
            );
        } else {
            assert_eq!(outcome.expect("ack"), AckOutcome::Completed, "{}", token.id);
        }
    }
    assert!(
        ack_calls < u64::from(PARTITIONS),
        "{} concurrent acks of {PARTITIONS} partitions took {ack_calls} calls",
        tokens.len()
    );
    assert_eq!(
        again.tasks.len(),
        PER_PARTITION,
        "the requeued partition claimed again"
    );
    for task in &again.tasks {
        assert_eq!(
            store.ack(&task.token).await.expect("ack"),
            AckOutcome::Completed
        );
    }
    for partition in &partitions {
        let stats = store.stats(partition, T0 + 1_000).await.expect("stats");
        assert_eq!(
            (stats.pending, stats.inflight, stats.done),
            (0, 0, PER_PARTITION as u64),
            "{partition}: {stats:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_share_calls_across_partitions_and_answer_per_partition() {
    calls_are_shared_and_answers_stay_per_partition(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_share_calls_across_partitions_and_answer_per_partition() {
    calls_are_shared_and_answers_stay_per_partition(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_and_a_poisoned_record_stay_in_their_partitions() {
    let (server, store) = start(true, 8 * 1024 * 1024).await;
    let open = QueueName::new("open").expect("queue");
    let held = QueueName::new("held").expect("queue");
    store.register_queue(&open, 2).await.expect("register");
    store.register_queue(&held, 1).await.expect("register");
    let (clean, poisoned, paused) = (
        Partition::new(open.clone(), 0),
        Partition::new(open, 1),
        Partition::new(held.clone(), 0),
    );
    for partition in [&clean, &poisoned, &paused] {
        for n in 0..3 {
            let task = NewTask {
                id: id(partition.index, n),
                due_ms: T0,
                payload: Bytes::from_static(b"p"),
                traceparent: None,
            };
            store
                .schedule(partition, task, ScheduleMode::Upsert)
                .await
                .expect("schedule");
        }
    }
    store.set_paused(&held, 1, true).await.expect("pause");
    server
        .command(&["HSET", "shared:{open:1}:tasks", "p1-t001", "garbage"])
        .expect("corrupt one record");
    for _ in 0..20 {
        let claims = [&clean, &poisoned, &paused]
            .map(|partition| store.claim_due(partition, T0, 10, T0 + 60_000, "node"));
        let [clean_batch, poisoned_batch, paused_batch] = futures::future::join_all(claims)
            .await
            .try_into()
            .unwrap_or_else(|_| unreachable!("three claims"));
        let (clean_batch, poisoned_batch, paused_batch) = (
            clean_batch.expect("claim"),
            poisoned_batch.expect("claim"),
            paused_batch.expect("claim"),
        );
        if clean_batch.tasks.is_empty() {
            // Claimed in an earlier round: nothing may have leaked into the others meanwhile.
            continue;
        }
        assert_eq!(clean_batch.tasks.len(), 3);
        assert!(clean_batch.dead_lettered.is_empty());
        assert_eq!(poisoned_batch.tasks.len(), 2);
        assert_eq!(poisoned_batch.dead_lettered.len(), 1);
        assert_eq!(poisoned_batch.dead_lettered[0].0.as_str(), "p1-t001");
        assert!(paused_batch.paused && paused_batch.tasks.is_empty());
        return;
    }
    panic!("the clean partition's tasks were never claimed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_byte_budget_is_shared_but_every_partition_gets_a_task() {
    // 600 bytes: about four of the 150-byte payloads per call, whatever shares it.
    let (_server, store) = start(true, 600).await;
    let queue = QueueName::new("q").expect("queue");
    store.register_queue(&queue, 8).await.expect("register");
    let partitions: Vec<Partition> = (0..8)
        .map(|index| Partition::new(queue.clone(), index))
        .collect();
    for partition in &partitions {
        for n in 0..10 {
            let task = NewTask {
                id: id(partition.index, n),
                due_ms: T0,
                payload: Bytes::from(vec![b'x'; 150]),
                traceparent: None,
            };
            store
                .schedule(partition, task, ScheduleMode::Upsert)
                .await
                .expect("schedule");
        }
    }
    let mut claimed = HashSet::new();
    for _ in 0..200 {
        let claims = partitions
            .iter()
            .map(|partition| store.claim_due(partition, T0, 10, T0 + 60_000, "node"));
        let mut round = 0;
        for (partition, batch) in partitions.iter().zip(join_all(claims).await) {
            let batch = batch.expect("claim");
            let bytes: usize = batch.tasks.iter().map(|task| task.payload.len()).sum();
            assert!(
                batch.tasks.len() <= 1 || bytes <= 600,
                "{partition}: {} tasks, {bytes} bytes",
                batch.tasks.len()
            );
            for task in batch.tasks {
                assert!(claimed.insert(task.token.id.to_string()), "claimed twice");
                round += 1;
            }
        }
        if claimed.len() == 80 {
            return;
        }
        assert!(
            round > 0,
            "a round claimed nothing with {} left",
            80 - claimed.len()
        );
    }
    panic!("only {} of 80 tasks claimed", claimed.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_token_acked_twice_at_once_completes_once() {
    let (_server, store) = start(true, 8 * 1024 * 1024).await;
    let queue = QueueName::new("q").expect("queue");
    store.register_queue(&queue, 2).await.expect("register");
    let partitions: Vec<Partition> = (0..2)
        .map(|index| Partition::new(queue.clone(), index))
        .collect();
    schedule_everything(&store, &partitions).await;
    let tokens = claim_everything(&store, &partitions).await;
    // Every token twice, all at once: they share calls, so a call sees an id twice.
    let acks = join_all(tokens.iter().chain(&tokens).map(|token| store.ack(token))).await;
    let (completed, stale) =
        acks.iter()
            .fold((0, 0), |(completed, stale), outcome| match outcome {
                Ok(AckOutcome::Completed) => (completed + 1, stale),
                Err(StorageError::StaleLease { .. }) => (completed, stale + 1),
                other => panic!("{other:?}"),
            });
    assert_eq!((completed, stale), (tokens.len(), tokens.len()));
    for partition in &partitions {
        let stats = store.stats(partition, T0 + 1_000).await.expect("stats");
        assert_eq!(
            (stats.inflight, stats.done),
            (0, PER_PARTITION as u64),
            "{stats:?}"
        );
    }
}
