//! A handler that says when to retry ([`RetryAfter`]) is retried then, not on the queue's
//! backoff: the attempt counts, the delay is capped at the queue's `backoff.max`, and once
//! `max_attempts` ran out the task is dead-lettered with the reason as its last error.

mod support;

use std::time::Duration;

use delayq_engine::config::{BackoffConfig, QueueConfig};
use delayq_engine::{HandlerError, RetryAfter, Scheduler, Task, When};
use delayq_storage::TaskState;
use support::{fast_config, Recorder, TestBackend};

/// Far longer than any test waits: a retry that comes sooner was not on the backoff.
const LONG_BACKOFF: Duration = Duration::from_secs(60);

/// Each task's first attempt asks to be retried after `delay`; the second succeeds.
fn asking_once(
    delay: Duration,
    recorder: Recorder,
) -> impl Fn(Task) -> futures::future::Ready<Result<(), HandlerError>> + Send + Sync + 'static {
    move |task: Task| {
        recorder.record(&task);
        futures::future::ready(if task.attempt == 1 {
            Err(Box::new(RetryAfter::new(
                delay,
                format!("receiver busy: retry {} later", task.id),
            )) as HandlerError)
        } else {
            Ok(())
        })
    }
}

async fn wait_for_state(node: &Scheduler, queue: &str, id: &str, state: TaskState) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
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

/// The gap between a task's first and second delivery, in cluster ms.
fn retry_gap_ms(recorder: &Recorder) -> u64 {
    let firings = recorder.firings();
    assert_eq!(
        firings.iter().map(|f| f.attempt).collect::<Vec<_>>(),
        vec![1, 2],
        "one asked-for retry, then success: {firings:?}"
    );
    firings[1].fired_ms - firings[0].fired_ms
}

async fn a_retry_after_is_retried_when_asked_not_on_the_backoff(backend: TestBackend) {
    let mut config = fast_config();
    config.queue_defaults.backoff = BackoffConfig {
        initial: LONG_BACKOFF,
        max: LONG_BACKOFF,
    };
    // Asks for an hour: capped at this queue's backoff.max of 1 s.
    config.queues.insert(
        "capped".to_owned(),
        QueueConfig {
            backoff: BackoffConfig {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(1),
            },
            ..config.queue_defaults
        },
    );
    config.queues.insert(
        "last-chance".to_owned(),
        QueueConfig {
            max_attempts: 1,
            ..config.queue_defaults
        },
    );
    let asked = Recorder::new();
    let capped = Recorder::new();
    let last_chance = Recorder::new();
    let node = backend
        .builder(&config)
        .handler(
            "asked",
            asking_once(Duration::from_millis(700), asked.clone()),
        )
        .handler(
            "capped",
            asking_once(Duration::from_secs(3600), capped.clone()),
        )
        .handler(
            "last-chance",
            asking_once(Duration::from_millis(100), last_chance.clone()),
        )
        .start()
        .await
        .expect("node starts");
    let now = When::In(Duration::ZERO);
    for queue in ["asked", "capped", "last-chance"] {
        node.schedule(queue, "t", now, "").await.expect("schedule");
    }

    wait_for_state(&node, "asked", "t", TaskState::Done).await;
    let gap = retry_gap_ms(&asked);
    assert!(
        (650..10_000).contains(&gap),
        "retried {gap} ms after asking for 700 ms (the backoff is 60 s)"
    );

    wait_for_state(&node, "capped", "t", TaskState::Done).await;
    let gap = retry_gap_ms(&capped);
    assert!(
        (950..10_000).contains(&gap),
        "retried {gap} ms after asking for an hour on a queue whose backoff.max is 1 s"
    );

    // The attempt counts: with max_attempts 1 there is no retry to ask for.
    wait_for_state(&node, "last-chance", "t", TaskState::Dead).await;
    let dead = node
        .get("last-chance", "t")
        .await
        .expect("get")
        .expect("the dead letter");
    assert_eq!(dead.attempt, 1, "{dead:?}");
    assert_eq!(
        dead.last_error.as_deref(),
        Some("receiver busy: retry t later"),
        "{dead:?}"
    );
    assert_eq!(last_chance.len(), 1);
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_is_retried_when_asked_not_on_the_backoff_in_memory() {
    a_retry_after_is_retried_when_asked_not_on_the_backoff(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_is_retried_when_asked_not_on_the_backoff_on_redis() {
    a_retry_after_is_retried_when_asked_not_on_the_backoff(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_is_retried_when_asked_not_on_the_backoff_on_postgres() {
    a_retry_after_is_retried_when_asked_not_on_the_backoff(TestBackend::postgres()).await;
}

#[test]
fn retry_after_is_found_through_the_source_chain() {
    #[derive(Debug, thiserror::Error)]
    #[error("posting failed")]
    struct Wrapper(#[source] RetryAfter);
    let wrapped = Wrapper(RetryAfter::new(Duration::from_secs(2), "429"));
    let found = RetryAfter::find_in(&wrapped).expect("found under the wrapper");
    assert_eq!(found.delay(), Duration::from_secs(2));
    assert!(RetryAfter::find_in(&std::io::Error::other("plain")).is_none());
}
