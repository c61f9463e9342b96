//! Failures are visible: errors, panics and timeouts are retried with backoff, then
//! dead-lettered; the worker survives a panic.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use delayq_engine::config::QueueConfig;
use delayq_engine::{Scheduler, Task, When};
use delayq_storage::TaskState;
use support::{fast_config, wait_until, Recorder, TestBackend};

fn failing_until(
    successes_from_attempt: u32,
    recorder: Recorder,
) -> impl Fn(Task) -> futures::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    move |task: Task| {
        recorder.record(&task);
        if task.attempt >= successes_from_attempt {
            futures::future::ready(Ok(()))
        } else {
            futures::future::ready(Err(std::io::Error::other(format!(
                "attempt {} refused",
                task.attempt
            ))))
        }
    }
}

async fn wait_for_state(node: &Scheduler, queue: &str, id: &str, state: TaskState) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let info = node.get(queue, id).await.expect("get");
        if info.as_ref().map(|i| i.state) == Some(state) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{queue}/{id} never reached {state:?}: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn failures_are_retried_then_dead_lettered(backend: TestBackend) {
    let mut config = fast_config();
    config.queues.insert(
        "slow".to_owned(),
        QueueConfig {
            timeout: Duration::from_millis(200),
            ..config.queue_defaults
        },
    );
    let flaky = Recorder::new();
    let hopeless = Recorder::new();
    let panicky = Recorder::new();
    let slow = Recorder::new();
    let panics = panicky.clone();
    let sleeps = slow.clone();
    let node = backend
        .builder(&config)
        .handler("flaky", failing_until(3, flaky.clone()))
        .handler("hopeless", failing_until(u32::MAX, hopeless.clone()))
        .handler("panicky", move |task: Task| {
            panics.record(&task);
            async move {
                if task.id == "boom" {
                    panic!("handler exploded on {}", task.id);
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .handler("slow", move |task: Task| {
            sleeps.record(&task);
            async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    // Four queues of 16 partitions, all owned by the only node.
    wait_until(
        Duration::from_secs(10),
        "the node owns its partitions",
        || node.owned_partitions().len() == 64,
    )
    .await;
    let now = When::In(Duration::ZERO);
    node.schedule("flaky", "f", now, "")
        .await
        .expect("schedule");
    node.schedule("hopeless", "h", now, "")
        .await
        .expect("schedule");
    node.schedule("panicky", "boom", now, "")
        .await
        .expect("schedule");
    node.schedule("slow", "s", now, "").await.expect("schedule");

    // Failing twice, then succeeding: three deliveries, attempts 1, 2, 3, then done.
    wait_for_state(&node, "flaky", "f", TaskState::Done).await;
    let attempts: Vec<u32> = flaky.firings().iter().map(|f| f.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    // Backoff: the retries were spaced by at least the initial backoff's fixed half.
    let fired: Vec<u64> = flaky.firings().iter().map(|f| f.fired_ms).collect();
    assert!(
        fired[1] - fired[0] >= 25 && fired[2] - fired[1] >= 25,
        "{fired:?}"
    );

    // Always failing: dead after max_attempts (3) with the last error kept.
    wait_for_state(&node, "hopeless", "h", TaskState::Dead).await;
    let dead = node
        .get("hopeless", "h")
        .await
        .expect("get")
        .expect("dead task");
    assert_eq!(dead.attempt, 3);
    assert_eq!(hopeless.len(), 3);
    assert!(
        dead.last_error
            .as_deref()
            .unwrap_or("")
            .contains("attempt 3 refused"),
        "{dead:?}"
    );

    // A panic fails the attempt and the worker lives on.
    wait_for_state(&node, "panicky", "boom", TaskState::Dead).await;
    let dead = node
        .get("panicky", "boom")
        .await
        .expect("get")
        .expect("dead");
    assert!(
        dead.last_error
            .as_deref()
            .unwrap_or("")
            .contains("panicked"),
        "{dead:?}"
    );
    node.schedule("panicky", "calm", now, "")
        .await
        .expect("schedule");
    wait_for_state(&node, "panicky", "calm", TaskState::Done).await;

    // Over the timeout: failed as timed out, retried, then dead.
    wait_for_state(&node, "slow", "s", TaskState::Dead).await;
    let dead = node.get("slow", "s").await.expect("get").expect("dead");
    assert!(
        dead.last_error
            .as_deref()
            .unwrap_or("")
            .contains("timed out"),
        "{dead:?}"
    );
    assert_eq!(slow.len(), 3);
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_are_retried_then_dead_lettered_on_redis() {
    failures_are_retried_then_dead_lettered(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_are_retried_then_dead_lettered_on_postgres() {
    failures_are_retried_then_dead_lettered(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_are_retried_then_dead_lettered_in_memory() {
    failures_are_retried_then_dead_lettered(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schedule_that_already_fired_is_a_duplicate() {
    let backend = TestBackend::redis();
    let recorder = Recorder::new();
    let node = backend
        .builder(&fast_config())
        .handler("orders", recorder.handler())
        .start()
        .await
        .expect("node starts");
    let due = node.now_ms() + 100;
    let first = node
        .schedule("orders", "once", When::At(due), "")
        .await
        .expect("scheduled");
    assert!(!first.duplicate);
    wait_for_state(&node, "orders", "once", TaskState::Done).await;
    let again = node
        .schedule("orders", "once", When::At(due), "")
        .await
        .expect("re-sent");
    assert!(again.duplicate, "{again:?}");
    // A different due re-arms the id.
    let rearmed = node
        .schedule("orders", "once", When::At(due + 1), "")
        .await
        .expect("re-armed");
    assert!(!rearmed.duplicate);
    wait_until(Duration::from_secs(10), "the re-armed task fired", || {
        recorder.len() == 2
    })
    .await;
    let dues: HashMap<u64, usize> = recorder.firings().iter().fold(HashMap::new(), |mut m, f| {
        *m.entry(f.due_ms).or_insert(0) += 1;
        m
    });
    assert_eq!(dues.get(&due), Some(&1));
    node.shutdown().await.expect("shutdown");
}
