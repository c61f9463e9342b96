//! The conformance suite against the Redis backend on a 3-master Redis Cluster (started by
//! `delayq-testkit`): the same cases as `conformance_redis.rs`, each with a key prefix and a
//! main queue of its own (so their partitions' slots spread over the masters). A cluster takes seconds to form, so one test owns one cluster and runs every case
//! against it, a few at a time; a failing case is reported by name with its panic.

#[macro_use]
mod conformance;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use conformance::{Make, Subject, SubjectFuture};
use delayq_redis::{ConnectOptions, Timeouts, Topology};
use delayq_storage::{RedisStore, RedisStoreOptions, StoreOptions};
use delayq_testkit::RedisCluster;
use futures::stream::{self, StreamExt};
use futures::FutureExt;

/// Cases running at once: enough to keep the three masters busy on two cores.
const PARALLEL: usize = 6;
/// The longest one case may take.
const CASE_LIMIT: Duration = Duration::from_secs(60);

/// The seed URLs of the cluster the running test owns.
static SEEDS: OnceLock<Vec<String>> = OnceLock::new();

fn cluster_store(options: StoreOptions) -> SubjectFuture {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    Box::pin(async move {
        let seeds = SEEDS.get().expect("the test started the cluster").clone();
        let case = NEXT.fetch_add(1, Ordering::Relaxed);
        let key_prefix = format!("conformance-{}-{case}", std::process::id());
        let redis = ConnectOptions::new(Topology::cluster(seeds)).with_timeouts(Timeouts {
            start: Duration::from_secs(20),
            ..Timeouts::default()
        });
        let store = RedisStore::connect(RedisStoreOptions {
            redis,
            key_prefix,
            store: options,
            wait_replicas: None,
        })
        .await
        .unwrap_or_else(|error| panic!("connect to the cluster: {error}"));
        // A queue of its own, so that the cases' partitions spread over the three masters.
        Subject::new(Arc::new(store), None).on_queue(format!("conformance-{case}"))
    })
}

type Case = (&'static str, fn(Make) -> Pin<Box<dyn Future<Output = ()>>>);

/// Runs every case against `make`, [`PARALLEL`] at a time; returns `name: why` per failure.
async fn run_cases(cases: Vec<Case>, make: Make) -> Vec<String> {
    stream::iter(cases)
        .map(|(name, run)| async move {
            let started = Instant::now();
            let outcome = tokio::time::timeout(
                CASE_LIMIT,
                std::panic::AssertUnwindSafe(run(make)).catch_unwind(),
            )
            .await;
            let failure = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(panic)) => Some(format!("{name}: {}", panic_text(&*panic))),
                Err(_) => Some(format!("{name}: not done within {CASE_LIMIT:?}")),
            };
            (name, started.elapsed(), failure)
        })
        .buffer_unordered(PARALLEL)
        .filter_map(|(name, took, failure)| async move {
            if took > Duration::from_secs(5) {
                eprintln!("slow case {name}: {took:?}");
            }
            failure
        })
        .collect()
        .await
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_else(|| "a non-string panic".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_conformance_case_holds_on_a_three_master_cluster() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(0))
        .await
        .expect("start the cluster");
    assert_eq!(cluster.masters().len(), 3);
    SEEDS
        .set(cluster.seed_urls())
        .expect("one cluster per test binary");
    let mut cases: Vec<Case> = conformance_suite!(cases);
    cases.extend(flow_conformance_suite!(cases));
    let count = cases.len();
    let started = Instant::now();
    let failures = run_cases(cases, cluster_store).await;
    eprintln!("{count} cases on the cluster in {:?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed on the cluster:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        cluster.logs()
    );
}
