//! The Redis backend over TLS (client certificates) as an ACL user limited to its key prefix:
//! every operation works; a wrong password fails at once with a clear error that shows no
//! password.

use std::time::{Duration, Instant};

use bytes::Bytes;
use delayq_redis::{ConnectOptions, Timeouts, TlsOptions, Topology};
use delayq_storage::{
    partition_of, AckOutcome, Cancel, FailAction, FailOutcome, NewTask, Partition, QueueName,
    RedisStore, RedisStoreOptions, ScheduleMode, StorageError, StoreOptions, TaskId, TaskState,
    TaskStore,
};
use delayq_testkit::{AclUser, TlsRedis, DELAYQ_COMMANDS};

const T0: u64 = 1_700_000_000_000;
const PREFIX: &str = "app";

/// Commands the store calls (directly or from its scripts) beyond testkit's
/// [`DELAYQ_COMMANDS`]: `ZMSCORE` (ack.lua) and `HSETNX` (the queue registry).
const STORE_EXTRA_COMMANDS: &[&str] = &["zmscore", "hsetnx"];

fn store_user() -> AclUser {
    let mut user = AclUser::delayq(PREFIX);
    user.commands.extend(
        STORE_EXTRA_COMMANDS
            .iter()
            .map(|command| (*command).to_owned()),
    );
    user
}

fn options(server: &TlsRedis, url: String, start: Duration) -> RedisStoreOptions {
    let files = server.files();
    let redis = ConnectOptions::new(Topology::standalone(url))
        .with_tls(TlsOptions {
            ca_file: Some(files.ca_file.clone()),
            cert_file: Some(files.client_cert.clone()),
            key_file: Some(files.client_key.clone()),
        })
        .with_timeouts(Timeouts {
            start,
            ..Timeouts::default()
        });
    RedisStoreOptions {
        redis,
        key_prefix: PREFIX.to_owned(),
        store: StoreOptions::default(),
        wait_replicas: None,
    }
}

fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: TaskId::new(name).expect("valid id"),
        due_ms,
        payload: Bytes::from(format!("payload of {name}")),
        traceparent: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_limited_user_runs_every_operation_over_tls() {
    let server = tokio::task::spawn_blocking(|| TlsRedis::start_with(store_user()))
        .await
        .expect("start the TLS server");
    let store = RedisStore::connect(options(&server, server.user_url(), Duration::from_secs(10)))
        .await
        .unwrap_or_else(|error| {
            panic!("the limited user connects: {error}\n{}", server.log_tail())
        });
    let queue = QueueName::new("orders").expect("valid queue");
    assert_eq!(store.register_queue(&queue, 4).await.expect("register"), 4);
    assert_eq!(store.queues().await.expect("queues"), [(queue.clone(), 4)]);

    let items: Vec<(Partition, NewTask)> = (0..40)
        .map(|n| {
            let task = task(&format!("t-{n}"), T0 + n);
            let partition = Partition::new(queue.clone(), partition_of(&task.id, 4));
            (partition, task)
        })
        .collect();
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    let p = Partition::new(queue.clone(), 0);
    store
        .schedule(&p, task("single", T0), ScheduleMode::Upsert)
        .await
        .expect("schedule");
    store
        .schedule(&p, task("gone", T0 + 99_000), ScheduleMode::IfAbsent)
        .await
        .expect("schedule if absent");
    assert_eq!(
        store
            .cancel(&p, &TaskId::new("gone").expect("id"))
            .await
            .expect("cancel"),
        Cancel::Cancelled
    );
    let window = store
        .peek_window(&p, T0, T0 + 100, 100)
        .await
        .expect("peek_window");
    assert!(!window.is_empty());

    let mut claimed = 0;
    for index in 0..4 {
        let partition = Partition::new(queue.clone(), index);
        let batch = store
            .claim_due(&partition, T0 + 100, 100, T0 + 60_000, "node")
            .await
            .expect("claim_due");
        let recovered = store
            .recover_claim(&partition, "node", T0 + 60_000)
            .await
            .expect("recover_claim");
        assert_eq!(recovered.tasks.len(), batch.tasks.len());
        for (n, claimed_task) in batch.tasks.iter().enumerate() {
            store
                .renew(&claimed_task.token, T0 + 90_000)
                .await
                .expect("renew");
            if n == 0 {
                let outcome = store
                    .fail(&claimed_task.token, "boom", FailAction::DeadLetter)
                    .await
                    .expect("fail");
                assert_eq!(outcome, FailOutcome::DeadLettered);
            } else {
                let outcome = store.ack(&claimed_task.token).await.expect("ack");
                assert_eq!(outcome, AckOutcome::Completed);
            }
        }
        claimed += batch.tasks.len();
        let dead = store.list_dead(&partition, 10).await.expect("list_dead");
        if let Some(first) = dead.first() {
            assert!(store
                .retry_dead(&partition, &first.id, T0 + 200_000)
                .await
                .expect("retry_dead"));
        }
        store
            .purge_dead(&partition, None)
            .await
            .expect("purge_dead");
        store
            .prune_done(&partition, u64::MAX, 100)
            .await
            .expect("prune_done");
        store
            .requeue_expired(&partition, T0 + 100, 10)
            .await
            .expect("requeue_expired");
        let stats = store.stats(&partition, T0 + 100).await.expect("stats");
        assert_eq!(stats.inflight, 0, "{stats:?}");
    }
    assert_eq!(claimed, 41, "every due task claimed once");
    let info = store
        .get(&p, &TaskId::new("single").expect("id"))
        .await
        .expect("get");
    assert!(matches!(
        info.map(|info| info.state),
        Some(TaskState::Done | TaskState::Pending)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_at_once_with_a_clear_error_and_no_password() {
    let server = tokio::task::spawn_blocking(|| TlsRedis::start_with(store_user()))
        .await
        .expect("start the TLS server");
    let wrong = "wrong-secret-7731";
    let started = Instant::now();
    let error = RedisStore::connect(options(
        &server,
        server.url_as("delayq", wrong),
        Duration::from_secs(20),
    ))
    .await
    .expect_err("a wrong password is refused");
    let took = started.elapsed();
    let message = error.to_string();
    eprintln!("{message} (after {took:?})");
    assert!(
        took < Duration::from_secs(5),
        "a refused login is not retried until the start timeout: {took:?}"
    );
    assert!(!error.is_transient(), "{error:?}");
    assert!(matches!(error, StorageError::Backend { .. }), "{error:?}");
    assert!(message.contains("refused the login"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", server.port())),
        "{message}"
    );
    let shown = format!("{message} {error:?}");
    assert!(!shown.contains(wrong), "{shown}");
    assert!(!shown.contains(&server.user().password), "{shown}");
    assert!(DELAYQ_COMMANDS.contains(&"evalsha"));
}
