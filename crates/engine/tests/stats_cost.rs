//! `Scheduler::stats` with many queues on Redis: every partition read, 16 at once over all
//! queues, one read at a time per scheduler, concurrent callers sharing reads, and never an
//! answer read before the call (DESIGN.md, "Cost model").

mod support;

use std::time::{Duration, Instant};

use delayq_engine::When;
use delayq_storage::QueueName;
use support::{fast_config, TestBackend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_of_50_queues_of_64_partitions_on_redis() {
    let backend = TestBackend::redis();
    let scheduler = backend
        .builder(&fast_config())
        .start()
        .await
        .expect("a producer");
    let store = scheduler.store();
    for i in 0..50 {
        let queue = QueueName::new(format!("queue-{i:02}")).expect("name");
        store.register_queue(&queue, 64).await.expect("register");
    }
    for i in 0..20 {
        scheduler
            .schedule(
                "queue-07",
                &format!("t{i}"),
                When::In(Duration::from_secs(600)),
                "",
            )
            .await
            .expect("schedule");
    }

    let started = Instant::now();
    let stats = scheduler.stats().await.expect("stats");
    let one = started.elapsed();
    assert_eq!(stats.len(), 50);
    assert_eq!(stats["queue-07"].pending, 20);

    // Callers at once share reads instead of each reading 3,200 partitions.
    let started = Instant::now();
    let answers = futures::future::join_all((0..8).map(|_| scheduler.stats())).await;
    let eight = started.elapsed();
    for answer in answers {
        assert_eq!(answer.expect("stats")["queue-07"].pending, 20);
    }
    eprintln!("stats() of 50 queues × 64 partitions on Redis: {one:?} alone, {eight:?} for 8 callers at once");

    // Sharing never answers with a read older than the call.
    scheduler
        .schedule("queue-07", "late", When::In(Duration::from_secs(600)), "")
        .await
        .expect("schedule");
    assert_eq!(
        scheduler.stats().await.expect("stats")["queue-07"].pending,
        21
    );
    // An allowed age may reuse the last read.
    let reused = scheduler
        .stats_within(Duration::from_secs(3600))
        .await
        .expect("stats");
    assert_eq!(reused["queue-07"].pending, 21);

    assert!(one < Duration::from_secs(10), "one read took {one:?}");
    assert!(
        eight < one * 4 + Duration::from_secs(2),
        "8 callers took {eight:?}, one {one:?}"
    );
    scheduler.shutdown().await.expect("shutdown");
}
