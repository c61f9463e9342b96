//! Rolling upgrades: records written by an earlier release (its own Lua scripts, kept as
//! fixtures and run as they were) are claimed, acked, failed, cancelled and dead-lettered by
//! this release, and its queue registry is found (`fixtures/v0.1.0/`); and a node of the
//! release v0.2.0 (`fixtures/v0.2.0/`: one partition per `EVALSHA` call,
//! cjson claim receipts) works one partition together with this release's store (Functions,
//! shared calls, the new receipt), through crashed claims and lease expiry, losing nothing.

use bytes::Bytes;
use delayq_storage::{
    AckOutcome, Cancel, FailAction, FailOutcome, LeaseToken, Partition, QueueName, RedisStore,
    RedisStoreOptions, StoreOptions, TaskId, TaskState, TaskStore,
};
use delayq_testkit::RedisServer;
use redis::Value;

const T0: u64 = 1_700_000_000_000;
const LEASE: u64 = T0 + 60_000;

/// One script of the previous release, with the shared parts it was built with.
fn old_script(parts: &[&str], body: &str) -> String {
    let mut code = parts.join("\n");
    code.push('\n');
    code.push_str(body);
    code
}

const RECORD: &str = include_str!("fixtures/v0.1.0/record.lua");
const UTIL: &str = include_str!("fixtures/v0.1.0/util.lua");
const LEASE_LUA: &str = include_str!("fixtures/v0.1.0/lease.lua");

/// Runs an old release's script as it ran it (`EVAL`).
async fn eval(
    connection: &mut redis::aio::MultiplexedConnection,
    code: &str,
    keys: &[&str],
    args: &[String],
) -> Value {
    let mut command = redis::cmd("EVAL");
    command.arg(code).arg(keys.len()).arg(keys).arg(args);
    command
        .query_async(connection)
        .await
        .expect("the old script runs")
}

struct OldRelease {
    connection: redis::aio::MultiplexedConnection,
}

impl OldRelease {
    const KEYS: [&'static str; 5] = [
        "up:{q:0}:due",
        "up:{q:0}:tasks",
        "up:{q:0}:inflight",
        "up:{q:0}:done",
        "up:{q:0}:dead",
    ];

    async fn eval(&mut self, code: &str, keys: &[&str], args: &[String]) -> Value {
        eval(&mut self.connection, code, keys, args).await
    }

    async fn schedule(&mut self, items: &[(&str, u64)]) {
        let code = old_script(
            &[RECORD, UTIL],
            include_str!("fixtures/v0.1.0/schedule.lua"),
        );
        let mut args = vec!["upsert".to_owned(), "3600000".to_owned()];
        for (id, due) in items {
            args.extend([id.to_string(), due.to_string(), format!("payload of {id}")]);
        }
        self.eval(&code, &Self::KEYS, &args).await;
    }

    /// Claims with the old script; returns (id, generation, claim) per claimed task.
    async fn claim(&mut self, now: u64, limit: usize) -> Vec<(String, u64, u64)> {
        let code = old_script(
            &[RECORD, UTIL],
            include_str!("fixtures/v0.1.0/claim_due.lua"),
        );
        let args = [now.to_string(), limit.to_string(), LEASE.to_string()];
        let reply = self.eval(&code, &Self::KEYS[..3], &args).await;
        let Value::Array(values) = reply else {
            panic!("old claim reply: {reply:?}");
        };
        values[1..]
            .chunks(2)
            .map(|pair| {
                let text = |value: &Value| match value {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => panic!("{other:?}"),
                };
                let (id, record) = (text(&pair[0]), text(&pair[1]));
                let fields: Vec<&str> = record.split('|').collect();
                let generation = fields[1].parse().expect("generation");
                let claim = fields[3].parse().expect("claim");
                (id, generation, claim)
            })
            .collect()
    }

    async fn fail(&mut self, task: &(String, u64, u64), error: &str, retry_at: Option<u64>) {
        let code = old_script(
            &[RECORD, LEASE_LUA, UTIL],
            include_str!("fixtures/v0.1.0/fail.lua"),
        );
        let keys = [Self::KEYS[0], Self::KEYS[1], Self::KEYS[2], Self::KEYS[4]];
        let (action, due) = match retry_at {
            Some(due) => ("retry", due.to_string()),
            None => ("dead", "0".to_owned()),
        };
        let args = [
            task.0.clone(),
            task.1.to_string(),
            task.2.to_string(),
            error.to_owned(),
            action.to_owned(),
            due,
        ];
        self.eval(&code, &keys, &args).await;
    }
}

fn token(p: &Partition, task: &(String, u64, u64)) -> LeaseToken {
    LeaseToken {
        partition: p.clone(),
        id: TaskId::new(&task.0).expect("id"),
        generation: task.1,
        claim: task.2,
    }
}

fn id(name: &str) -> TaskId {
    TaskId::new(name).expect("id")
}

#[tokio::test]
async fn records_of_the_previous_release_are_claimed_acked_failed_cancelled_and_dead_lettered() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let client = server.client();
    let mut old = OldRelease {
        connection: client
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
    };
    // The previous release: its registry key, tasks pending, in flight, retrying, dead.
    server
        .command(&["HSET", "up:queues", "q", "1"])
        .expect("old registry");
    old.schedule(&[
        ("ack-me", T0),
        ("fail-me", T0),
        ("retried", T0),
        ("dead", T0),
        ("pending", T0 + 1),
        ("cancel-me", T0 + 2),
    ])
    .await;
    let claimed = old.claim(T0, 4).await;
    let names: Vec<&str> = claimed.iter().map(|task| task.0.as_str()).collect();
    assert_eq!(names, ["ack-me", "dead", "fail-me", "retried"]);
    let find = |name: &str| {
        claimed
            .iter()
            .find(|task| task.0 == name)
            .expect("claimed")
            .clone()
    };
    old.fail(&find("retried"), "old error", Some(T0 + 5)).await;
    old.fail(&find("dead"), "old death", None).await;

    // This release takes over.
    let store = RedisStore::connect(RedisStoreOptions {
        key_prefix: "up".to_owned(),
        store: StoreOptions::default(),
        ..RedisStoreOptions::standalone(server.url())
    })
    .await
    .expect("connect");
    let queue = QueueName::new("q").expect("queue");
    let listed = store.queues().await.expect("queues");
    assert_eq!(listed, [(queue.clone(), 1)], "the old registry is found");
    let p = Partition::new(queue, 0);

    let dead = store
        .get(&p, &id("dead"))
        .await
        .expect("get")
        .expect("dead");
    assert_eq!(dead.state, TaskState::Dead);
    assert_eq!(dead.last_error.as_deref(), Some("old death"));
    assert_eq!(dead.payload, Bytes::from("payload of dead"));

    // In flight under the old release's claims: acked and failed with those tokens.
    assert_eq!(
        store.ack(&token(&p, &find("ack-me"))).await.expect("ack"),
        AckOutcome::Completed
    );
    let done = store
        .get(&p, &id("ack-me"))
        .await
        .expect("get")
        .expect("done");
    assert_eq!((done.state, done.due_ms), (TaskState::Done, T0));
    let failed = store
        .fail(
            &token(&p, &find("fail-me")),
            "new error",
            FailAction::RetryAt(T0 + 6),
        )
        .await
        .expect("fail");
    assert_eq!(
        failed,
        FailOutcome::Retrying {
            attempt: 2,
            due_ms: T0 + 6
        }
    );
    assert_eq!(
        store.cancel(&p, &id("cancel-me")).await.expect("cancel"),
        Cancel::Cancelled
    );

    // Pending records of the old release are claimed by this one.
    let batch = store
        .claim_due(&p, T0 + 10, 10, LEASE, "new")
        .await
        .expect("claim");
    assert!(batch.dead_lettered.is_empty(), "{:?}", batch.dead_lettered);
    let got: Vec<(String, u32, Bytes)> = batch
        .tasks
        .iter()
        .map(|task| (task.id.to_string(), task.attempt, task.payload.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("pending".to_owned(), 1, Bytes::from("payload of pending")),
            ("retried".to_owned(), 2, Bytes::from("payload of retried")),
            ("fail-me".to_owned(), 2, Bytes::from("payload of fail-me")),
        ]
    );
    let retried = store
        .get(&p, &id("retried"))
        .await
        .expect("get")
        .expect("inflight");
    assert_eq!(retried.last_error.as_deref(), Some("old error"));
    for task in &batch.tasks {
        let outcome = store
            .fail(&task.token, "gave up", FailAction::DeadLetter)
            .await
            .expect("dead-letter");
        assert_eq!(outcome, FailOutcome::DeadLettered);
    }
    let dead_letters = store.list_dead(&p, 10).await.expect("list_dead");
    assert_eq!(dead_letters.len(), 4);
    assert_eq!(
        store
            .schedule(
                &p,
                delayq_storage::NewTask {
                    id: id("ack-me"),
                    due_ms: T0,
                    payload: Bytes::new(),
                    traceparent: None,
                },
                delayq_storage::ScheduleMode::Upsert,
            )
            .await
            .expect("schedule"),
        delayq_storage::ScheduleOutcome::Duplicate,
        "dedup reads the old release's done records"
    );
}

/// The release v0.2.0 (`fixtures/v0.2.0`, one partition per call,
/// `EVALSHA`, cjson receipts), run as it ran, on the partition `mix:{q:0}`.
struct PreviousRelease {
    connection: redis::aio::MultiplexedConnection,
    owner: &'static str,
}

mod previous {
    pub const RECORD: &str = include_str!("fixtures/v0.2.0/record.lua");
    pub const UTIL: &str = include_str!("fixtures/v0.2.0/util.lua");
    pub const LEASE: &str = include_str!("fixtures/v0.2.0/lease.lua");
    pub const SWEEP: &str = include_str!("fixtures/v0.2.0/sweep.lua");
    pub const CLAIM: &str = include_str!("fixtures/v0.2.0/claim_due.lua");
    pub const ACK: &str = include_str!("fixtures/v0.2.0/ack.lua");
    pub const SCHEDULE: &str = include_str!("fixtures/v0.2.0/schedule.lua");
    pub const RECOVER: &str = include_str!("fixtures/v0.2.0/recover_claim.lua");
    pub const REQUEUE: &str = include_str!("fixtures/v0.2.0/requeue_expired.lua");
}

/// An old token: (id, generation, claim).
type OldToken = (String, u64, u64);

impl PreviousRelease {
    const DUE: &'static str = "mix:{q:0}:due";
    const TASKS: &'static str = "mix:{q:0}:tasks";
    const INFLIGHT: &'static str = "mix:{q:0}:inflight";
    const DONE: &'static str = "mix:{q:0}:done";
    const DEAD: &'static str = "mix:{q:0}:dead";
    const RECEIPT: &'static str = "mix:{q:0}:claim";
    const PAUSED: &'static str = "mix:{q:0}:paused";

    async fn eval(&mut self, code: &str, keys: &[&str], args: &[String]) -> Value {
        eval(&mut self.connection, code, keys, args).await
    }

    async fn schedule(&mut self, ids: &[String], due: u64) {
        let code = old_script(&[previous::RECORD, previous::UTIL], previous::SCHEDULE);
        let mut args = vec!["upsert".to_owned(), "3600000".to_owned()];
        for id in ids {
            args.extend([id.clone(), due.to_string(), format!("payload of {id}")]);
        }
        let keys = [
            Self::DUE,
            Self::TASKS,
            Self::INFLIGHT,
            Self::DONE,
            Self::DEAD,
        ];
        self.eval(&code, &keys, &args).await;
    }

    async fn claim(&mut self, now: u64, limit: usize, lease: u64) -> Vec<OldToken> {
        let code = old_script(&[previous::RECORD, previous::UTIL], previous::CLAIM);
        let keys = [
            Self::DUE,
            Self::TASKS,
            Self::INFLIGHT,
            Self::DEAD,
            Self::RECEIPT,
            Self::PAUSED,
        ];
        let args = [
            now.to_string(),
            limit.to_string(),
            lease.to_string(),
            self.owner.to_owned(),
            (8 << 20).to_string(),
        ];
        let Value::Array(values) = self.eval(&code, &keys, &args).await else {
            panic!("the old claim's reply is an array");
        };
        let claimed: usize = redis::from_redis_value_ref(&values[1]).expect("a count");
        values[2..2 + 2 * claimed]
            .chunks(2)
            .map(|pair| {
                let id: String = redis::from_redis_value_ref(&pair[0]).expect("an id");
                let record: String = redis::from_redis_value_ref(&pair[1]).expect("a record");
                let fields: Vec<&str> = record.split('|').collect();
                (
                    id,
                    fields[1].parse().expect("generation"),
                    fields[3].parse().expect("claim"),
                )
            })
            .collect()
    }

    /// The old ack's verdicts, one per token.
    async fn ack(&mut self, tokens: &[OldToken]) -> Vec<String> {
        let code = old_script(
            &[previous::RECORD, previous::LEASE, previous::UTIL],
            previous::ACK,
        );
        let mut args = vec!["3600000".to_owned()];
        for (id, generation, claim) in tokens {
            args.extend([id.clone(), generation.to_string(), claim.to_string()]);
        }
        let keys = [Self::TASKS, Self::INFLIGHT, Self::DONE];
        redis::from_redis_value(self.eval(&code, &keys, &args).await).expect("verdicts")
    }

    async fn requeue(&mut self, now: u64) -> Vec<String> {
        let code = old_script(
            &[previous::RECORD, previous::UTIL, previous::SWEEP],
            previous::REQUEUE,
        );
        let keys = [Self::DUE, Self::TASKS, Self::INFLIGHT];
        let args = [now.to_string(), "1000".to_owned()];
        redis::from_redis_value(self.eval(&code, &keys, &args).await).expect("ids")
    }

    /// The ids the old `recover_claim` finds for `owner` and `lease`.
    async fn recover(&mut self, owner: &str, lease: u64) -> Vec<String> {
        let code = old_script(&[previous::RECORD], previous::RECOVER);
        let keys = [Self::TASKS, Self::INFLIGHT, Self::RECEIPT];
        let args = [owner.to_owned(), lease.to_string()];
        let Value::Array(values) = self.eval(&code, &keys, &args).await else {
            panic!("the old recover's reply is an array");
        };
        values
            .chunks(2)
            .map(|pair| redis::from_redis_value_ref(&pair[0]).expect("an id"))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_the_previous_release_and_one_of_this_release_on_one_partition_lose_nothing() {
    const EACH: usize = 100;
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis-server");
    let mut old = PreviousRelease {
        connection: server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
        owner: "old-node",
    };
    let store = RedisStore::connect(RedisStoreOptions {
        key_prefix: "mix".to_owned(),
        ..RedisStoreOptions::standalone(server.url())
    })
    .await
    .expect("connect");
    let queue = QueueName::new("q").expect("queue");
    store.register_queue(&queue, 1).await.expect("register");
    let p = Partition::new(queue, 0);

    // Half of the tasks scheduled by each release.
    let old_ids: Vec<String> = (0..EACH).map(|n| format!("old-{n:03}")).collect();
    old.schedule(&old_ids, T0).await;
    let items = (0..EACH)
        .map(|n| {
            let task = delayq_storage::NewTask {
                id: id(&format!("new-{n:03}")),
                due_ms: T0,
                payload: Bytes::from(format!("payload of new-{n:03}")),
                traceparent: None,
            };
            (p.clone(), task)
        })
        .collect();
    for outcome in store
        .schedule_many(items, delayq_storage::ScheduleMode::Upsert)
        .await
        .expect("schedule_many")
    {
        outcome.expect("scheduled");
    }

    let mut completed: Vec<String> = Vec::new();
    // Both claim in turn; each one's first claim "crashes" (never acked).
    let (mut old_crashed, mut new_crashed) = (None, None);
    loop {
        let old_tokens = old.claim(T0 + 10, 7, LEASE).await;
        let new_batch = store
            .claim_due(&p, T0 + 10, 7, LEASE, "new-node")
            .await
            .expect("claim");
        assert!(
            new_batch.dead_lettered.is_empty(),
            "{:?}",
            new_batch.dead_lettered
        );
        if old_tokens.is_empty() && new_batch.tasks.is_empty() {
            break;
        }
        if old_crashed.is_none() {
            old_crashed = Some(old_tokens);
        } else {
            for (token, verdict) in old_tokens.iter().zip(old.ack(&old_tokens).await) {
                assert_eq!(verdict, "C", "{}", token.0);
                completed.push(token.0.clone());
            }
        }
        if new_crashed.is_none() {
            new_crashed = Some(new_batch.tasks);
        } else {
            for task in new_batch.tasks {
                assert_eq!(
                    store.ack(&task.token).await.expect("ack"),
                    AckOutcome::Completed
                );
                completed.push(task.id.to_string());
            }
        }
    }
    let (old_crashed, new_crashed) = (
        old_crashed.expect("the old node claimed"),
        new_crashed.expect("the new node claimed"),
    );
    assert!(!old_crashed.is_empty() && !new_crashed.is_empty());

    // The leases run out: the new release takes back the old one's crashed claim and the
    // other way round (each sweep takes both, whoever runs first).
    let mut requeued = store
        .requeue_expired(&p, LEASE + 1, 1000)
        .await
        .expect("requeue");
    requeued.extend(
        old.requeue(LEASE + 1)
            .await
            .into_iter()
            .map(|name| id(&name)),
    );
    assert_eq!(requeued.len(), old_crashed.len() + new_crashed.len());
    // The stale tokens of the crashed claims change nothing, in either release.
    for verdict in old.ack(&old_crashed).await {
        assert_eq!(verdict, "L");
    }
    for task in &new_crashed {
        let refused = store.ack(&task.token).await;
        assert!(
            matches!(
                refused,
                Err(delayq_storage::StorageError::StaleLease { .. })
            ),
            "{refused:?}"
        );
    }
    // Claimed again, the old release first, under a later lease.
    let later = LEASE + 60_000;
    let old_again = old.claim(LEASE + 1, 3, later).await;
    // The new release finds the old one's claim by its (cjson) receipt; the old one finds
    // nothing in a receipt the new one wrote, and fails on nothing.
    let recovered = store
        .recover_claim(&p, "old-node", later)
        .await
        .expect("recover the old node's claim");
    let mut recovered_ids: Vec<String> = recovered
        .tasks
        .iter()
        .map(|task| task.id.to_string())
        .collect();
    let mut old_again_ids: Vec<String> = old_again.iter().map(|token| token.0.clone()).collect();
    recovered_ids.sort();
    old_again_ids.sort();
    assert_eq!(recovered_ids, old_again_ids);
    for (token, verdict) in old_again.iter().zip(old.ack(&old_again).await) {
        assert_eq!(verdict, "C");
        completed.push(token.0.clone());
    }
    let new_again = store
        .claim_due(&p, LEASE + 1, 100, later, "new-node")
        .await
        .expect("claim");
    assert!(old.recover("new-node", later).await.is_empty());
    for task in new_again.tasks {
        assert_eq!(
            store.ack(&task.token).await.expect("ack"),
            AckOutcome::Completed
        );
        completed.push(task.id.to_string());
    }

    // Every task completed exactly once, and nothing is left.
    completed.sort();
    let mut expected: Vec<String> = old_ids.clone();
    expected.extend((0..EACH).map(|n| format!("new-{n:03}")));
    expected.sort();
    assert_eq!(completed, expected);
    let stats = store.stats(&p, LEASE + 1).await.expect("stats");
    assert_eq!(
        (stats.pending, stats.inflight, stats.dead, stats.done),
        (0, 0, 0, 2 * EACH as u64),
        "{stats:?}"
    );
}
