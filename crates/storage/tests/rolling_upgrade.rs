//! A rolling upgrade: records written by the previous release (its own Lua scripts, kept as
//! fixtures in `tests/fixtures/v0.1.0/`, run as they were) are claimed, acked, failed,
//! cancelled and dead-lettered by this release, and its queue registry is found.

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
        let mut command = redis::cmd("EVAL");
        command.arg(code).arg(keys.len()).arg(keys).arg(args);
        command
            .query_async(&mut self.connection)
            .await
            .expect("the old script runs")
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
                },
                delayq_storage::ScheduleMode::Upsert,
            )
            .await
            .expect("schedule"),
        delayq_storage::ScheduleOutcome::Duplicate,
        "dedup reads the old release's done records"
    );
}
