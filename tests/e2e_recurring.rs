//! End-to-end, guarantee 10 through the binary: `delayq recurring ...` and `delayq node`
//! processes. An `every: 1s` schedule fires each tick once, on consecutive tick ids and never
//! early, through a `kill -9` and a new node, through two rolling restarts of replicas that
//! all declare it in their cluster.yaml, and with 30 schedules on a 3-master Redis Cluster;
//! misfire policies after every node was down; pause, resume and delete from the CLI; bad
//! specs are usage errors and store nothing; `recurring next` shows the DST rules.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{
    assert_success, delayq_command, now_ms, parse_json, run_with_deadline, wait_until, Env,
    FireLog, Fired, NodeProcess, BASE_CONFIG, DELAYQ,
};
use delayq_testkit::RedisCluster;
use serde_json::Value;

const TICKS: &str = "\
queue_defaults:
  partitions: 8
";

/// The ticks of `schedule` among `fires`, by tick time.
fn ticks(fires: &[Fired], schedule: &str) -> BTreeMap<u64, Vec<Fired>> {
    let mut ticks: BTreeMap<u64, Vec<Fired>> = BTreeMap::new();
    for fire in fires {
        let tick = fire
            .id
            .strip_prefix(schedule)
            .and_then(|rest| rest.strip_prefix('@'))
            .and_then(|tick| tick.parse::<u64>().ok());
        if let Some(tick) = tick {
            ticks.entry(tick).or_default().push(fire.clone());
        }
    }
    ticks
}

/// Each tick of `schedule` fired once (twice only when its first run was on a node of
/// `killed`), never early, with consecutive tick times `period_ms` apart; returns how many.
fn assert_each_tick_once(
    fires: &[Fired],
    schedule: &str,
    period_ms: u64,
    killed: &HashSet<String>,
) -> usize {
    let ticks = ticks(fires, schedule);
    let times: Vec<u64> = ticks.keys().copied().collect();
    assert!(!times.is_empty(), "no tick of {schedule} fired");
    for pair in times.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            period_ms,
            "{schedule}: consecutive ticks {times:?}"
        );
    }
    for (tick, runs) in &ticks {
        for run in runs {
            assert!(
                run.fired_ms >= *tick,
                "{schedule}: tick {tick} fired early: {run:?}"
            );
            assert_eq!(run.due_ms, *tick, "{run:?}");
        }
        if runs.len() > 1 {
            assert!(
                killed.contains(&runs[0].node),
                "{schedule}: tick {tick} ran {} times: {runs:?}",
                runs.len()
            );
        }
    }
    times.len()
}

#[test]
fn every_second_ticks_fire_once_through_a_kill_and_a_new_node() {
    let env = Env::start(TICKS);
    let set = env.json(&[
        "recurring",
        "set",
        "sweep",
        "--queue",
        "ticks",
        "--every",
        "1s",
    ]);
    assert_eq!(set["result"], "created", "{set}");
    assert_eq!(set["name"], "sweep");
    assert_eq!(set["queue"], "ticks");
    let fires = FireLog::default();
    let mut nodes = env.start_nodes(3, &fires);
    wait_until(
        Duration::from_secs(20),
        "three ticks fired",
        || ticks(&fires.snapshot(), "sweep").len() >= 3,
        || format!("{:?}", fires.snapshot()),
    );
    let victim = nodes.remove(0);
    let killed: HashSet<String> = [victim.node_id()].into();
    victim.crash();
    nodes.push(NodeProcess::spawn_into(
        "node-3",
        env.command(&["node"]),
        fires.clone(),
    ));
    let before = ticks(&fires.snapshot(), "sweep").len();
    wait_until(
        Duration::from_secs(30),
        "seven more ticks fired",
        || ticks(&fires.snapshot(), "sweep").len() >= before + 7,
        || format!("{:?}", fires.snapshot()),
    );
    let count = assert_each_tick_once(&fires.snapshot(), "sweep", 1_000, &killed);
    let got = env.json(&["recurring", "get", "sweep"]);
    assert!(got["fired"].as_u64().unwrap_or(0) >= count as u64, "{got}");
    assert_eq!(got["missed"], 0, "{got}");
    assert_eq!(got["every"], "1s", "{got}");
    assert!(got["last_fired_ms"].as_u64().is_some(), "{got}");
    // A tick is an ordinary task: `delayq get` finds it by its id.
    let first = *ticks(&fires.snapshot(), "sweep")
        .keys()
        .next()
        .expect("a tick");
    let task = env.json(&["get", "ticks", &format!("sweep@{first}")]);
    assert_eq!(task["state"], "done", "{task}");
    let listed = env.json(&["recurring", "list", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn replicas_declaring_it_in_their_config_fire_each_tick_once_through_two_rolling_restarts() {
    let env = Env::start(&format!(
        "{TICKS}recurring:\n  declared:\n    queue: ticks\n    every: 1s\n    payload: '{{\"kind\":\"sweep\"}}'\n"
    ));
    let fires = FireLog::default();
    let mut nodes = env.start_nodes(3, &fires);
    let created = env.json(&["recurring", "get", "declared"]);
    wait_until(
        Duration::from_secs(20),
        "two ticks fired",
        || ticks(&fires.snapshot(), "declared").len() >= 2,
        || format!("{:?}", fires.snapshot()),
    );
    for round in 0..2 {
        for index in 0..3 {
            let mut old = nodes.remove(0);
            old.terminate();
            assert!(
                old.wait_exit(Duration::from_secs(20)).is_some(),
                "{}",
                old.stderr_text()
            );
            let label = format!("node-r{round}-{index}");
            nodes.push(NodeProcess::spawn_into(
                &label,
                env.command(&["node"]),
                fires.clone(),
            ));
        }
    }
    env.wait_for_members(3);
    let before = ticks(&fires.snapshot(), "declared").len();
    wait_until(
        Duration::from_secs(20),
        "three more ticks after the restarts",
        || ticks(&fires.snapshot(), "declared").len() >= before + 3,
        || format!("{:?}", fires.snapshot()),
    );
    // Graceful restarts: no extra tick and none skipped.
    assert_each_tick_once(&fires.snapshot(), "declared", 1_000, &HashSet::new());
    let after = env.json(&["recurring", "get", "declared"]);
    assert_eq!(after["created_ms"], created["created_ms"], "{after}");
    assert_eq!(
        after["updated_ms"], created["updated_ms"],
        "unchanged moves nothing: {after}"
    );
    assert_eq!(after["payload"], "{\"kind\":\"sweep\"}");
    assert_eq!(after["missed"], 0, "{after}");
}

#[test]
fn misfire_policies_pause_resume_delete_and_bad_input_through_the_cli() {
    let env = Env::start(TICKS);
    for (name, misfire) in [("m-skip", "skip"), ("m-once", "once"), ("m-all", "all")] {
        let args = [
            "recurring",
            "set",
            name,
            "--queue",
            "ticks",
            "--every",
            "1s",
            "--misfire",
            misfire,
            "--misfire-grace",
            "1s",
        ];
        assert_eq!(env.json(&args)["result"], "created");
    }
    // The same spec again: unchanged. Another one: updated.
    let again = env.json(&[
        "recurring",
        "set",
        "m-skip",
        "--queue",
        "ticks",
        "--every",
        "1s",
        "--misfire",
        "skip",
        "--misfire-grace",
        "1s",
    ]);
    assert_eq!(again["result"], "unchanged", "{again}");
    // Every node down for 5 s.
    std::thread::sleep(Duration::from_secs(5));
    let started = now_ms();
    let fires = FireLog::default();
    let _node = NodeProcess::spawn_into("node", env.command(&["node"]), fires.clone());
    wait_until(
        Duration::from_secs(20),
        "every schedule fires live ticks",
        || {
            let snapshot = fires.snapshot();
            ["m-skip", "m-once", "m-all"].iter().all(|name| {
                ticks(&snapshot, name)
                    .keys()
                    .any(|&tick| tick > started + 1_000)
            })
        },
        || format!("{:?}", fires.snapshot()),
    );
    let snapshot = fires.snapshot();
    // The missed ticks a policy fires are exactly those fired more than the grace (1 s)
    // after their time.
    let missed_fired = |name: &str| {
        ticks(&snapshot, name)
            .iter()
            .filter(|(&tick, runs)| runs[0].fired_ms > tick + 1_000)
            .count()
    };
    assert_eq!(missed_fired("m-skip"), 0);
    assert_eq!(missed_fired("m-once"), 1);
    assert!(missed_fired("m-all") >= 3, "{}", missed_fired("m-all"));
    let skip = env.json(&["recurring", "get", "m-skip"]);
    assert!(skip["missed"].as_u64().unwrap_or(0) >= 3, "{skip}");

    // Pause: nothing fires; resume: ticks again.
    let paused = env.json(&["recurring", "pause", "m-skip"]);
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["next_ms"], Value::Null, "{paused}");
    let paused_at = now_ms();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        ticks(&fires.snapshot(), "m-skip")
            .keys()
            .all(|&tick| tick <= paused_at + 100),
        "a paused schedule fires nothing"
    );
    let resumed = env.json(&["recurring", "resume", "m-skip"]);
    assert_eq!(resumed["paused"], false, "{resumed}");
    let resumed_at = now_ms();
    wait_until(
        Duration::from_secs(10),
        "a tick after the resume",
        || {
            ticks(&fires.snapshot(), "m-skip")
                .keys()
                .any(|&tick| tick > resumed_at)
        },
        || format!("{:?}", fires.snapshot()),
    );

    // Delete: gone (get exits 1), nothing fires any more.
    let deleted = env.json(&["recurring", "delete", "m-skip"]);
    assert_eq!(deleted["deleted"], true, "{deleted}");
    let deleted_at = now_ms();
    let get = env.run(&["recurring", "get", "m-skip"]);
    assert_eq!(get.status.code(), Some(1), "{get:?}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(ticks(&fires.snapshot(), "m-skip")
        .keys()
        .all(|&tick| tick <= deleted_at + 100));
    for name in ["m-skip", "m-once", "m-all"] {
        for (tick, runs) in ticks(&fires.snapshot(), name) {
            assert_eq!(runs.len(), 1, "{name}@{tick}: {runs:?}");
        }
    }

    // Bad input: exit 2, naming the field and the value, and nothing stored.
    let cases: [(&[&str], &str); 6] = [
        (&["--cron", "61 * * * *"], "61 * * * *"),
        (
            &["--cron", "0 9 * * *", "--tz", "Mars/Olympus"],
            "Mars/Olympus",
        ),
        (&["--every", "500ms"], "500ms"),
        (&["--every", "1s", "--misfire", "sometimes"], "sometimes"),
        (
            &[
                "--every",
                "1s",
                "--start-at",
                "2030-01-02T00:00:00Z",
                "--end-at",
                "2030-01-01T00:00:00Z",
            ],
            "end_at",
        ),
        (&["--every", "1s", "--start-at", "1700000000"], "1700000000"),
    ];
    for (flags, named) in cases {
        let mut args = vec!["recurring", "set", "bad", "--queue", "ticks"];
        args.extend_from_slice(flags);
        let output = env.run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    let output = env.run(&[
        "recurring",
        "set",
        "a@b",
        "--queue",
        "ticks",
        "--every",
        "1s",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("a@b"));
    let get = env.run(&["recurring", "get", "bad"]);
    assert_eq!(get.status.code(), Some(1), "nothing was stored");
}

#[test]
fn recurring_next_shows_the_daylight_saving_rules_without_redis() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let next = |args: &[&str]| -> Vec<Value> {
        let mut command = Command::new(DELAYQ);
        command
            .current_dir(dir.path())
            .env("DELAYQ_REDIS_URL", "redis://127.0.0.1:1/0")
            .args(["recurring", "next"])
            .args(args);
        let output = run_with_deadline(command, None);
        assert_success(&output, args);
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| parse_json(line.as_bytes()))
            .collect()
    };
    // A daily 02:30 in New York fires at 03:00 EDT on the day the clocks skip 02:00-03:00.
    let spring = next(&[
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2027-03-13T12:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(
        spring[0]["local"], "2027-03-14T03:00:00-04:00",
        "{spring:?}"
    );
    assert_eq!(spring[0]["tick_ms"], 1_805_007_600_000u64);
    assert_eq!(spring[1]["local"], "2027-03-15T02:30:00-04:00");
    // 01:30 repeated by the fall-back fires once; every 30 minutes fires through it.
    let fixed = next(&[
        "--cron",
        "30 1 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2027-11-06T12:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(fixed[0]["local"], "2027-11-07T01:30:00-04:00");
    assert_eq!(fixed[1]["local"], "2027-11-08T01:30:00-05:00");
    let halves = next(&[
        "--cron",
        "*/30 * * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2027-11-07T04:50:00Z",
        "--count",
        "4",
    ]);
    let locals: Vec<&str> = halves
        .iter()
        .filter_map(|tick| tick["local"].as_str())
        .collect();
    assert_eq!(
        locals,
        [
            "2027-11-07T01:00:00-04:00",
            "2027-11-07T01:30:00-04:00",
            "2027-11-07T01:00:00-05:00",
            "2027-11-07T01:30:00-05:00"
        ]
    );
    // Lord Howe moves its clocks by 30 minutes: 02:00-02:30 does not exist on 2027-10-03.
    let howe = next(&[
        "--cron",
        "15 2 * * *",
        "--tz",
        "Australia/Lord_Howe",
        "--from",
        "2027-10-02T00:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(howe[0]["local"], "2027-10-03T02:30:00+11:00", "{howe:?}");
    assert_eq!(howe[1]["local"], "2027-10-04T02:15:00+11:00");
}

/// A cluster.yaml naming the cluster's seeds, and `delayq --config <it>` commands.
struct ClusterSetup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl ClusterSetup {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = delayq_command(self.dir.path());
        command.arg("--config").arg(&self.config).args(args);
        command
    }

    fn json(&self, args: &[&str]) -> Value {
        let output = run_with_deadline(self.command(args), None);
        assert_success(&output, args);
        parse_json(&output.stdout)
    }
}

#[test]
fn thirty_schedules_spread_over_a_three_master_cluster_fire_each_tick_once() {
    let cluster = RedisCluster::start(0);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("cluster.yaml");
    let seeds = cluster.seed_urls().join(", ");
    let prefix = format!("e2erec{}", std::process::id());
    let mut yaml = format!(
        "redis:\n  cluster: [{seeds}]\n  key_prefix: {prefix}\n  response_timeout: 600ms\n{BASE_CONFIG}{TICKS}recurring:\n"
    );
    for index in 0..30 {
        yaml.push_str(&format!("  s{index}:\n    queue: ticks\n    every: 1s\n"));
    }
    std::fs::write(&config, yaml).expect("write cluster.yaml");
    let setup = ClusterSetup { dir, config };
    let fires = FireLog::default();
    let _nodes: Vec<NodeProcess> = (0..2)
        .map(|index| {
            NodeProcess::spawn_into(
                &format!("node-{index}"),
                setup.command(&["node"]),
                fires.clone(),
            )
        })
        .collect();
    wait_until(
        Duration::from_secs(40),
        "every schedule fired three ticks",
        || {
            let snapshot = fires.snapshot();
            (0..30).all(|index| ticks(&snapshot, &format!("s{index}")).len() >= 3)
        },
        || format!("{} fires", fires.snapshot().len()),
    );
    let snapshot = fires.snapshot();
    for index in 0..30 {
        assert_each_tick_once(&snapshot, &format!("s{index}"), 1_000, &HashSet::new());
    }
    let listed = setup.json(&["recurring", "list", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(30), "{listed}");
    // The schedules' shards live on more than one master.
    let holding: Vec<u16> = cluster
        .masters()
        .into_iter()
        .filter(|&port| {
            let output = Command::new("redis-cli")
                .args(["-p", &port.to_string(), "--scan", "--pattern"])
                .arg(format!("{prefix}:{{recurring#*}}:schedules"))
                .output()
                .expect("run redis-cli");
            !String::from_utf8_lossy(&output.stdout).trim().is_empty()
        })
        .collect();
    assert!(holding.len() >= 2, "schedules on masters {holding:?}");
}

#[test]
fn metrics_count_ticks_by_schedule_and_outcome() {
    let env = Env::start(&format!(
        "{TICKS}http:\n  listen: 127.0.0.1:0\nrecurring:\n  metered:\n    queue: ticks\n    every: 1s\n"
    ));
    let node = env.spawn_node("web", &[]);
    let url = common::logged_http_url(&node.stderr_text()).expect("the node logged its URL");
    let scrape = || {
        common::http_call("GET", &format!("{url}/metrics"), None, None)
            .1
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    wait_until(
        Duration::from_secs(20),
        "ticks counted in /metrics",
        || {
            let text = scrape();
            text.contains("delayq_recurring_ticks_total{schedule=\"metered\",outcome=\"fired\"}")
                && text.contains("delayq_recurring_schedules 1")
        },
        scrape,
    );
}

#[test]
fn serve_declares_the_configured_schedules_without_joining_the_cluster() {
    let env = Env::start(&format!(
        "{TICKS}recurring:\n  from-api:\n    queue: ticks\n    cron: \"0 9 * * *\"\n    tz: Europe/Berlin\n"
    ));
    let mut command = env.command(&["serve", "--listen", "127.0.0.1:0"]);
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut serve = command.spawn().expect("spawn delayq serve");
    let declared = || env.run(&["recurring", "get", "from-api"]).status.success();
    wait_until(
        Duration::from_secs(20),
        "serve declared the schedule",
        declared,
        String::new,
    );
    let _ = serve.kill();
    let _ = serve.wait();
    let got = env.json(&["recurring", "get", "from-api"]);
    assert_eq!(got["cron"], "0 9 * * *", "{got}");
    assert_eq!(got["tz"], "Europe/Berlin", "{got}");
    assert_eq!(
        env.json(&["nodes", "--json"]),
        serde_json::json!([]),
        "serve joins no cluster"
    );
}
