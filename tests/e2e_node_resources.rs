//! End-to-end: no task is dead-lettered because of the node. A `delayq node --handler exec`
//! under a low `ulimit -n` runs handlers that hold their descriptors (a pipe each) until the
//! test releases them; the spawns beyond what the limit leaves fail with "Too many open
//! files". Those tasks (`max_attempts: 1`) are put back without spending their attempt, and
//! all of them run once the pressure goes.

mod common;

use std::time::{Duration, Instant};

use common::{http_call, wait_until, Env};

/// Open files of the node: enough to start, join and serve `/metrics`, far too few for
/// [`TASKS`] handlers at once.
const OPEN_FILES: u32 = 64;
/// Tasks due at once, each holding its handler until released.
const TASKS: usize = 80;

/// Before the fix (checked by hand, with the engine's requeue taken out): every spawn past
/// the limit failed the task's only attempt, `cannot run "sh": Too many open files`, and 58
/// of the 80 went to the dead letters while the other 22 held their descriptors.
#[test]
fn spawns_that_fail_for_lack_of_open_files_are_retried_without_spending_an_attempt() {
    let env = Env::start(
        "queues:\n  fd:\n    partitions: 4\n    concurrency: 128\n    max_attempts: 1\n    timeout: 60s\n",
    );
    let ran = env.dir.path().join("ran");
    let started = env.dir.path().join("started");
    let release = env.dir.path().join("release");
    for dir in [&ran, &started] {
        std::fs::create_dir_all(dir).expect("a directory");
    }
    // Each attempt leaves a mark, waits for the release, then records the run.
    let script = format!(
        "touch {started}/\"$DELAYQ_ID.$$\"; while [ ! -e {release} ]; do sleep 0.05; done; echo \"$DELAYQ_ATTEMPT\" > {ran}/\"$DELAYQ_ID\"",
        started = started.display(),
        release = release.display(),
        ran = ran.display(),
    );
    let (node, url) = env.spawn_exec_node_with_open_files("starved", OPEN_FILES, &script);
    let count = |dir: &std::path::Path| std::fs::read_dir(dir).map_or(0, |dir| dir.count());

    let due = common::now_ms() + 300;
    let lines: String = (0..TASKS)
        .map(|index| format!("{{\"id\":\"r{index}\",\"due_ms\":{due}}}\n"))
        .collect();
    common::load_tasks(&env, "fd", &lines, TASKS as u64);
    // The handlers that got descriptors hold them; the others could not start.
    node.wait_for_stderr("Too many open files", Duration::from_secs(30));
    assert!(
        node.stderr_text()
            .contains("could not start for lack of resources"),
        "the rate-limited warning: {}",
        node.stderr_text()
    );
    let holding = count(&started);
    eprintln!("{holding} handlers started under ulimit -n {OPEN_FILES} before the pressure");
    assert!(
        holding < TASKS,
        "the limit leaves room for fewer than {TASKS} handlers"
    );
    // While they wait, nothing is dead-lettered: the rest are put back again and again.
    std::thread::sleep(Duration::from_secs(2));
    let counts = env.stats("fd");
    assert_eq!(counts["dead"], 0, "nothing dead under pressure: {counts:?}");

    std::fs::write(&release, b"").expect("release the handlers");
    let start = Instant::now();
    wait_until(
        Duration::from_secs(60),
        "every task to run",
        || count(&ran) == TASKS,
        || format!("{} of {TASKS} ran: {}", count(&ran), node.stderr_text()),
    );
    eprintln!("all {TASKS} ran {:?} after the release", start.elapsed());
    env.wait_until_settled("fd", TASKS as u64, Duration::from_secs(30));
    let counts = env.stats("fd");
    assert_eq!(
        (counts["dead"], counts["done"]),
        (0, TASKS as u64),
        "{counts:?}"
    );
    // Counted, and each task's only attempt ran once.
    let (status, metrics) = http_call("GET", &format!("{url}/metrics"), None, None);
    assert_eq!(status, 200);
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    let failures: f64 = metrics
        .lines()
        .find(|line| line.starts_with("delayq_handler_resource_failures_total{queue=\"fd\"}"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no resource failure counted: {metrics}"));
    eprintln!("{failures} spawns failed for lack of open files and were retried");
    assert!(failures >= 1.0);
    for entry in std::fs::read_dir(&ran).expect("the ran directory") {
        let path = entry.expect("an entry").path();
        let attempt = std::fs::read_to_string(&path).expect("the attempt");
        assert_eq!(attempt.trim(), "1", "{}", path.display());
    }
    let dead = env.json(&["dead", "fd", "--json"]);
    assert_eq!(dead.as_array().map_or(0, Vec::len), 0, "{dead}");
}
