//! Guarantee 11 (pause) through the engine, on Redis and on the memory twin: once
//! `pause_queue` returned, no node fires a task of the queue (also a node that starts
//! meanwhile), schedules go on, and `resume_queue` fires the backlog at once.

mod support;

use std::time::{Duration, Instant};

use delayq_engine::{EngineError, When};
use support::{fast_config, wait_until, Recorder, TestBackend};

const QUEUE: &str = "controlled";

async fn pause_holds_every_fire_and_resume_fires_the_backlog(backend: TestBackend) {
    let config = fast_config();
    let recorder = Recorder::new();
    let start = |recorder: Recorder| {
        let builder = backend.builder(&config).handler(QUEUE, recorder.handler());
        async move { builder.start().await.expect("node starts") }
    };
    let a = start(recorder.clone()).await;
    let b = start(recorder.clone()).await;
    let now = a.now_ms();
    for index in 0..40 {
        let when = When::At(now + 300 + index * 50);
        a.schedule(QUEUE, &format!("t{index}"), when, "")
            .await
            .expect("schedule");
    }
    a.pause_queue(QUEUE).await.expect("pause");
    let paused_at = a.now_ms();
    assert_eq!(a.paused_queues().await.expect("paused"), [QUEUE]);
    // Schedules go on while paused; a node that joins meanwhile respects the pause.
    a.schedule(QUEUE, "late", When::In(Duration::ZERO), "")
        .await
        .expect("schedule while paused");
    let c = start(recorder.clone()).await;
    b.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_pause: Vec<_> = recorder
        .firings()
        .into_iter()
        .filter(|firing| firing.fired_ms > paused_at)
        .collect();
    assert!(
        after_pause.is_empty(),
        "fired while paused: {after_pause:?}"
    );

    c.resume_queue(QUEUE).await.expect("resume");
    let resumed = Instant::now();
    wait_until(Duration::from_secs(10), "the backlog fired", || {
        recorder.distinct() == 41
    })
    .await;
    assert!(
        resumed.elapsed() < Duration::from_secs(2),
        "the backlog fires at once on resume, took {:?}",
        resumed.elapsed()
    );
    assert!(a.paused_queues().await.expect("paused").is_empty());
    a.shutdown().await.expect("shutdown");
    c.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_holds_every_fire_and_resume_fires_the_backlog_on_redis() {
    pause_holds_every_fire_and_resume_fires_the_backlog(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_holds_every_fire_and_resume_fires_the_backlog_on_memory() {
    pause_holds_every_fire_and_resume_fires_the_backlog(TestBackend::memory()).await;
}

#[tokio::test]
async fn pausing_an_unknown_queue_is_an_error_naming_it() {
    let backend = TestBackend::memory();
    let producer = backend
        .builder(&fast_config())
        .start()
        .await
        .expect("producer");
    match producer.pause_queue("never-used").await {
        Err(EngineError::UnknownQueue { queue }) => assert_eq!(queue, "never-used"),
        other => panic!("expected UnknownQueue, got {other:?}"),
    }
    producer.shutdown().await.expect("shutdown");
}
