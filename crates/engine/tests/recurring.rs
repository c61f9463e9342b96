//! Guarantee 10 through the engine: a recurring schedule fires each tick once across the
//! cluster, whatever the number of replicas that declare it, node deaths, concurrent upserts
//! with different specs and `executed_retention: 0`; misfire and overlap policies; update,
//! pause, resume and delete. Each case runs on the Redis backend and on the memory twin.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use delayq_engine::recurring::{RawSpec, RecurringSpec, UpsertResult};
use delayq_engine::{Scheduler, Task};
use delayq_storage::StoreOptions;
use support::{fast_config, wait_until, Firing, Recorder, TestBackend};

const QUEUE: &str = "ticks";

fn every(period: &str) -> RawSpec {
    RawSpec {
        queue: Some(QUEUE.to_owned()),
        every: Some(period.to_owned()),
        ..RawSpec::default()
    }
}

fn spec(raw: RawSpec) -> RecurringSpec {
    raw.validate().expect("valid spec")
}

async fn node(
    backend: &TestBackend,
    config: &delayq_engine::config::Config,
    recorder: &Recorder,
) -> Scheduler {
    backend
        .builder(config)
        .handler(QUEUE, recorder.handler())
        .start()
        .await
        .expect("node starts")
}

/// The ticks of `schedule` that fired, by tick time, with their firings.
fn ticks_of(firings: &[Firing], schedule: &str) -> BTreeMap<u64, Vec<Firing>> {
    let mut ticks: BTreeMap<u64, Vec<Firing>> = BTreeMap::new();
    for firing in firings {
        if let Some(tick) = firing
            .id
            .strip_prefix(schedule)
            .and_then(|rest| rest.strip_prefix('@'))
            .and_then(|tick| tick.parse::<u64>().ok())
        {
            ticks.entry(tick).or_default().push(firing.clone());
        }
    }
    ticks
}

/// Every tick of `schedule` fired once, on time or late but never early, at consecutive
/// multiples of `period_ms`; a tick whose first run was on a node in `killed` may have run
/// again (its handler may have been cut off).
fn assert_each_tick_once(
    firings: &[Firing],
    schedule: &str,
    period_ms: u64,
    killed: &HashSet<String>,
) -> usize {
    let ticks = ticks_of(firings, schedule);
    assert!(!ticks.is_empty(), "no tick of {schedule} fired");
    let times: Vec<u64> = ticks.keys().copied().collect();
    for pair in times.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            period_ms,
            "ticks of {schedule} are consecutive: {times:?}"
        );
    }
    for (tick, runs) in &ticks {
        for run in runs {
            assert!(run.fired_ms >= *tick, "tick {tick} fired early: {run:?}");
            assert_eq!(run.due_ms, *tick);
        }
        if runs.len() > 1 {
            assert!(
                killed.contains(&runs[0].node),
                "tick {tick} of {schedule} ran {} times and not because its node died: {runs:?}",
                runs.len()
            );
        }
    }
    ticks.len()
}

async fn ticks_fire_once_each_across_nodes_with_one_killed(backend: TestBackend) {
    let config = fast_config();
    let recorder = Recorder::new();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(node(&backend, &config, &recorder).await);
    }
    let set = nodes[0]
        .set_recurring("sweep", spec(every("1s")))
        .await
        .expect("set");
    assert_eq!(set.result, UpsertResult::Created);
    wait_until(Duration::from_secs(15), "four ticks fired", || {
        ticks_of(&recorder.firings(), "sweep").len() >= 4
    })
    .await;
    let victim = nodes.remove(1);
    let killed: HashSet<String> = [victim.node_id().to_string()].into();
    victim.kill();
    nodes.push(node(&backend, &config, &recorder).await);
    let before = ticks_of(&recorder.firings(), "sweep").len();
    wait_until(Duration::from_secs(20), "five more ticks fired", || {
        ticks_of(&recorder.firings(), "sweep").len() >= before + 5
    })
    .await;
    let fired = assert_each_tick_once(&recorder.firings(), "sweep", 1_000, &killed);
    let view = nodes[0]
        .recurring("sweep")
        .await
        .expect("get")
        .expect("exists");
    assert!(view.fired as usize >= fired, "{view:?} vs {fired}");
    assert_eq!(view.missed, 0, "{view:?}");
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticks_fire_once_each_across_nodes_with_one_killed_on_redis() {
    ticks_fire_once_each_across_nodes_with_one_killed(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticks_fire_once_each_across_nodes_with_one_killed_on_postgres() {
    ticks_fire_once_each_across_nodes_with_one_killed(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticks_fire_once_each_across_nodes_with_one_killed_on_memory() {
    ticks_fire_once_each_across_nodes_with_one_killed(TestBackend::memory()).await;
}

async fn replicas_declaring_the_same_schedule_move_nothing(backend: TestBackend) {
    let mut config = fast_config();
    config
        .recurring
        .insert("declared".to_owned(), spec(every("1s")));
    let recorder = Recorder::new();
    // Every node upserts the declared schedule at start.
    let first = node(&backend, &config, &recorder).await;
    let created = first
        .recurring("declared")
        .await
        .expect("get")
        .expect("declared");
    let mut others = Vec::new();
    for _ in 0..2 {
        others.push(node(&backend, &config, &recorder).await);
    }
    let again = first
        .recurring("declared")
        .await
        .expect("get")
        .expect("declared");
    assert_eq!(
        again.created_ms, created.created_ms,
        "one schedule, not three"
    );
    assert_eq!(
        again.updated_ms, created.updated_ms,
        "unchanged moves nothing"
    );
    let answers = futures::future::join_all(
        others
            .iter()
            .map(|node| node.set_recurring("declared", spec(every("1s")))),
    )
    .await;
    for answer in answers {
        assert_eq!(answer.expect("set").result, UpsertResult::Unchanged);
    }
    wait_until(Duration::from_secs(15), "three ticks fired", || {
        ticks_of(&recorder.firings(), "declared").len() >= 3
    })
    .await;
    // A rolling restart of every replica: each one leaves and a new one declares again.
    let mut nodes = vec![first];
    nodes.extend(others);
    for _ in 0..3 {
        let old = nodes.remove(0);
        old.shutdown().await.expect("shutdown");
        nodes.push(node(&backend, &config, &recorder).await);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let before = ticks_of(&recorder.firings(), "declared").len();
    wait_until(
        Duration::from_secs(15),
        "more ticks after the restart",
        || ticks_of(&recorder.firings(), "declared").len() >= before + 2,
    )
    .await;
    assert_each_tick_once(&recorder.firings(), "declared", 1_000, &HashSet::new());
    let view = nodes[0]
        .recurring("declared")
        .await
        .expect("get")
        .expect("declared");
    assert_eq!(view.created_ms, created.created_ms);
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_declaring_the_same_schedule_move_nothing_on_redis() {
    replicas_declaring_the_same_schedule_move_nothing(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_declaring_the_same_schedule_move_nothing_on_postgres() {
    replicas_declaring_the_same_schedule_move_nothing(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_declaring_the_same_schedule_move_nothing_on_memory() {
    replicas_declaring_the_same_schedule_move_nothing(TestBackend::memory()).await;
}

async fn concurrent_upserts_of_different_specs_never_fire_a_tick_twice(backend: TestBackend) {
    let mut config = fast_config();
    // No executed-set: only the tick ledger keeps a repeated tick from firing again.
    config.engine.executed_retention = Duration::ZERO;
    let recorder = Recorder::new();
    let a = node(&backend, &config, &recorder).await;
    let b = node(&backend, &config, &recorder).await;
    let spec_a = || {
        spec(RawSpec {
            payload: Some("A".to_owned()),
            ..every("1s")
        })
    };
    let spec_b = || {
        spec(RawSpec {
            payload: Some("B".to_owned()),
            ..every("1s")
        })
    };
    a.set_recurring("deploy", spec_a()).await.expect("set");
    // A deploy where old and new replicas keep upserting their own spec.
    for _ in 0..12 {
        let (left, right) = tokio::join!(
            a.set_recurring("deploy", spec_a()),
            b.set_recurring("deploy", spec_b())
        );
        left.expect("set a");
        right.expect("set b");
        tokio::time::sleep(Duration::from_millis(350)).await;
    }
    let stored = a.recurring("deploy").await.expect("get").expect("exists");
    assert!(
        matches!(stored.spec.payload.as_deref(), Some("A") | Some("B")),
        "one of the two specs: {stored:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let fired = assert_each_tick_once(&recorder.firings(), "deploy", 1_000, &HashSet::new());
    assert!(fired >= 3, "ticks kept firing through the deploy: {fired}");
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upserts_of_different_specs_never_fire_a_tick_twice_on_redis() {
    concurrent_upserts_of_different_specs_never_fire_a_tick_twice(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upserts_of_different_specs_never_fire_a_tick_twice_on_postgres() {
    concurrent_upserts_of_different_specs_never_fire_a_tick_twice(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upserts_of_different_specs_never_fire_a_tick_twice_on_memory() {
    concurrent_upserts_of_different_specs_never_fire_a_tick_twice(TestBackend::memory_with(
        no_retention(),
    ))
    .await;
}

/// Store options with dedup off: only the tick ledger keeps a repeated tick from firing.
fn no_retention() -> StoreOptions {
    StoreOptions {
        executed_retention_ms: 0,
        ..StoreOptions::default()
    }
}

/// A step that fails between creating its tick and advancing the schedule (before the
/// compare-and-set is applied, or after it with the reply lost) is repeated by the next look;
/// with no executed-set, each tick still fires once.
async fn a_step_cut_off_between_creating_and_advancing_fires_each_tick_once(
    backend: TestBackend,
    after: bool,
) {
    let mut config = fast_config();
    config.engine.executed_retention = Duration::ZERO;
    let store = backend.recording_store(&config, no_retention()).await;
    let recorder = Recorder::new();
    let node = backend
        .builder(&config)
        .store(store.clone())
        .handler(QUEUE, recorder.handler())
        .start()
        .await
        .expect("node starts");
    node.set_recurring("cut", spec(every("1s")))
        .await
        .expect("set");
    store.fail_recurring_swaps(2, after);
    wait_until(Duration::from_secs(20), "six ticks fired", || {
        ticks_of(&recorder.firings(), "cut").len() >= 6
    })
    .await;
    store.fail_recurring_swaps(0, after);
    assert!(
        store.swap_faults() >= 3,
        "faults injected: {}",
        store.swap_faults()
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_each_tick_once(&recorder.firings(), "cut", 1_000, &HashSet::new());
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_cut_off_before_its_compare_and_set_fires_each_tick_once_on_redis() {
    a_step_cut_off_between_creating_and_advancing_fires_each_tick_once(TestBackend::redis(), false)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_cut_off_before_its_compare_and_set_fires_each_tick_once_on_memory() {
    a_step_cut_off_between_creating_and_advancing_fires_each_tick_once(
        TestBackend::memory_with(no_retention()),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_whose_compare_and_set_reply_is_lost_fires_each_tick_once_on_redis() {
    a_step_cut_off_between_creating_and_advancing_fires_each_tick_once(TestBackend::redis(), true)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_whose_compare_and_set_reply_is_lost_fires_each_tick_once_on_memory() {
    a_step_cut_off_between_creating_and_advancing_fires_each_tick_once(
        TestBackend::memory_with(no_retention()),
        true,
    )
    .await;
}

async fn misfire_policies_apply_after_every_node_was_down(backend: TestBackend) {
    let config = fast_config();
    let producer = backend.builder(&config).start().await.expect("producer");
    for (name, misfire) in [("m-skip", "skip"), ("m-once", "once"), ("m-all", "all")] {
        let raw = RawSpec {
            misfire: Some(misfire.to_owned()),
            misfire_grace: Some("1s".to_owned()),
            ..every("1s")
        };
        producer.set_recurring(name, spec(raw)).await.expect("set");
    }
    let created_ms = producer.now_ms();
    // No node alive for 5 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let recorder = Recorder::new();
    let started_ms = producer.now_ms();
    let node = node(&backend, &config, &recorder).await;
    wait_until(
        Duration::from_secs(10),
        "each schedule fires live ticks",
        || {
            let firings = recorder.firings();
            ["m-skip", "m-once", "m-all"].iter().all(|name| {
                ticks_of(&firings, name)
                    .keys()
                    .any(|&tick| tick > started_ms)
            })
        },
    )
    .await;
    let firings = recorder.firings();
    // A missed tick is one that could not fire within its grace (1 s): the ones a policy
    // fires anyway are exactly those fired more than the grace after their time.
    let old = |name: &str| {
        ticks_of(&firings, name)
            .iter()
            .filter(|(&tick, runs)| runs[0].fired_ms > tick + 1_000)
            .count()
    };
    assert_eq!(old("m-skip"), 0, "skip fires none of the missed ticks");
    assert_eq!(old("m-once"), 1, "once fires the latest missed tick once");
    assert!(
        old("m-all") >= 3,
        "all fires each missed tick: {}",
        old("m-all")
    );
    let all_ticks: Vec<u64> = ticks_of(&firings, "m-all").keys().copied().collect();
    assert!(
        all_ticks[0] <= created_ms + 2_000,
        "from the first missed one: {all_ticks:?}"
    );
    for name in ["m-skip", "m-once", "m-all"] {
        let view = node.recurring(name).await.expect("get").expect("exists");
        let expected_missed = match name {
            "m-all" => 0,
            _ => 2,
        };
        assert!(view.missed >= expected_missed, "{name}: {view:?}");
        for runs in ticks_of(&firings, name).values() {
            assert_eq!(runs.len(), 1, "{name}: {runs:?}");
        }
    }
    node.shutdown().await.expect("shutdown");
    producer.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misfire_policies_apply_after_every_node_was_down_on_redis() {
    misfire_policies_apply_after_every_node_was_down(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misfire_policies_apply_after_every_node_was_down_on_postgres() {
    misfire_policies_apply_after_every_node_was_down(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misfire_policies_apply_after_every_node_was_down_on_memory() {
    misfire_policies_apply_after_every_node_was_down(TestBackend::memory()).await;
}

async fn overlap_skip_skips_ticks_while_the_previous_one_runs(backend: TestBackend) {
    let config = fast_config();
    let recorder = Recorder::new();
    let slow = recorder.clone();
    let node = backend
        .builder(&config)
        .handler(QUEUE, move |task: Task| {
            slow.record(&task);
            async move {
                tokio::time::sleep(Duration::from_millis(2_500)).await;
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .expect("node starts");
    let raw = RawSpec {
        overlap: Some("skip".to_owned()),
        ..every("1s")
    };
    node.set_recurring("slow", spec(raw)).await.expect("set");
    wait_until(Duration::from_secs(20), "three ticks ran", || {
        ticks_of(&recorder.firings(), "slow").len() >= 3
    })
    .await;
    let ticks: Vec<u64> = ticks_of(&recorder.firings(), "slow")
        .keys()
        .copied()
        .collect();
    for pair in ticks.windows(2) {
        assert!(
            pair[1] - pair[0] >= 2_000,
            "no tick starts while the previous one runs: {ticks:?}"
        );
    }
    let view = node.recurring("slow").await.expect("get").expect("exists");
    assert!(view.skipped >= 2, "{view:?}");
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_skip_skips_ticks_while_the_previous_one_runs_on_redis() {
    overlap_skip_skips_ticks_while_the_previous_one_runs(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_skip_skips_ticks_while_the_previous_one_runs_on_postgres() {
    overlap_skip_skips_ticks_while_the_previous_one_runs(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_skip_skips_ticks_while_the_previous_one_runs_on_memory() {
    overlap_skip_skips_ticks_while_the_previous_one_runs(TestBackend::memory()).await;
}

async fn update_pause_resume_and_delete(backend: TestBackend) {
    let config = fast_config();
    let recorder = Recorder::new();
    let node = node(&backend, &config, &recorder).await;
    node.set_recurring("life", spec(every("1s")))
        .await
        .expect("set");
    wait_until(Duration::from_secs(10), "two ticks", || {
        ticks_of(&recorder.firings(), "life").len() >= 2
    })
    .await;
    // Update: every 2 s from the same anchor.
    let updated = node
        .set_recurring("life", spec(every("2s")))
        .await
        .expect("update");
    assert_eq!(updated.result, UpsertResult::Updated);
    let last_before = *ticks_of(&recorder.firings(), "life")
        .keys()
        .last()
        .expect("ticks");
    assert!(updated.next_ms.expect("next") > last_before);
    let updated_at = node.now_ms();
    wait_until(Duration::from_secs(10), "two ticks of the new spec", || {
        ticks_of(&recorder.firings(), "life")
            .keys()
            .filter(|&&tick| tick > updated_at + 1_000)
            .count()
            >= 2
    })
    .await;
    let late: Vec<u64> = ticks_of(&recorder.firings(), "life")
        .keys()
        .copied()
        .filter(|&tick| tick > updated_at + 1_000)
        .collect();
    assert_eq!(late[1] - late[0], 2_000, "{late:?}");

    // Pause: nothing fires; resume: it goes on, the ticks of the pause are skipped.
    let paused = node
        .pause_recurring("life")
        .await
        .expect("pause")
        .expect("exists");
    assert!(paused.paused && paused.next_ms.is_none());
    let paused_at = node.now_ms();
    let count_paused = recorder.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during: Vec<u64> = ticks_of(&recorder.firings(), "life")
        .keys()
        .copied()
        .filter(|&tick| tick > paused_at + 100)
        .collect();
    assert!(
        during.is_empty(),
        "a paused schedule fires nothing: {during:?}"
    );
    assert_eq!(recorder.len(), count_paused);
    let resumed = node
        .resume_recurring("life")
        .await
        .expect("resume")
        .expect("exists");
    assert!(!resumed.paused && resumed.next_ms.is_some());
    assert!(resumed.skipped >= 1, "{resumed:?}");
    let resumed_at = node.now_ms();
    wait_until(Duration::from_secs(10), "a tick after the resume", || {
        ticks_of(&recorder.firings(), "life")
            .keys()
            .any(|&tick| tick > resumed_at)
    })
    .await;

    // Delete: gone for good, its pending tick cancelled.
    assert!(node.delete_recurring("life").await.expect("delete"));
    assert!(!node.delete_recurring("life").await.expect("delete again"));
    assert!(node.recurring("life").await.expect("get").is_none());
    let deleted_at = node.now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<u64> = ticks_of(&recorder.firings(), "life")
        .keys()
        .copied()
        .filter(|&tick| tick > deleted_at)
        .collect();
    assert!(
        after.is_empty(),
        "a deleted schedule fires nothing: {after:?}"
    );
    for (tick, runs) in ticks_of(&recorder.firings(), "life") {
        assert_eq!(runs.len(), 1, "tick {tick} ran once: {runs:?}");
        assert!(runs[0].fired_ms >= tick, "never early: {runs:?}");
    }
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_pause_resume_and_delete_on_redis() {
    update_pause_resume_and_delete(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_pause_resume_and_delete_on_postgres() {
    update_pause_resume_and_delete(TestBackend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_pause_resume_and_delete_on_memory() {
    update_pause_resume_and_delete(TestBackend::memory()).await;
}

#[tokio::test]
async fn bad_specs_and_names_are_refused_and_nothing_is_stored() {
    let backend = TestBackend::memory();
    let node = backend
        .builder(&fast_config())
        .start()
        .await
        .expect("producer");
    let error = node
        .set_recurring("a@b", spec(every("1s")))
        .await
        .expect_err("a name with @");
    assert!(error.to_string().contains("a@b"), "{error}");
    assert!(node.list_recurring().await.expect("list").is_empty());
    let raw = RawSpec {
        queue: Some(QUEUE.to_owned()),
        cron: Some("0 25 * * *".to_owned()),
        ..RawSpec::default()
    };
    let error = raw.validate().expect_err("hour 25");
    assert_eq!(error.field, "cron");
    node.shutdown().await.expect("shutdown");
}
