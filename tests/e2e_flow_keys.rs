//! End-to-end, flow keys through the binary: 3 `delayq node` processes with `--handler exec`
//! on a queue with `flow_keys: true`; the handler scripts write their own start and end times,
//! which prove the bounds: `per_key_concurrency: 2` (no key ever runs 3 at once across the
//! processes, each key uses both slots) and `per_key_order: fifo` with a retry (one at a time,
//! in due order, the retry before the next task). A node asking for `flow_keys: false` on the
//! registered queue does not start and names the queue. `delayq keys` lists the keys holding
//! tasks back (JSON and table, `--limit` honoured and bounded) while a gated handler blocks
//! the queue's keys, and `delayq stats` counts them as `held_back`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{now_ms, wait_until, Env, NodeProcess};

const QUEUES: &str = "\
queue_defaults:
  partitions: 8
  backoff: { initial: 100ms, max: 200ms }
  timeout: 10s
queues:
  hooks:
    flow_keys: true
    per_key_concurrency: 2
  ledger:
    flow_keys: true
    per_key_order: fifo
";

/// Records `<queue> <id> <attempt> <start ns> <end ns>` after sleeping 150 ms; the first
/// attempt of `ledger`'s `acct:{a}:03` fails.
const SCRIPT: &str = r#"
cat > /dev/null
start=$(date +%s%N)
sleep 0.15
end=$(date +%s%N)
echo "$DELAYQ_QUEUE $DELAYQ_ID $DELAYQ_ATTEMPT $start $end" >> "$E2E_OUT"
if [ "$DELAYQ_ID" = "acct:{a}:03" ] && [ "$DELAYQ_ATTEMPT" = "1" ]; then
  exit 1
fi
"#;

/// One handler run as its script wrote it.
#[derive(Debug, Clone)]
struct Run {
    queue: String,
    id: String,
    attempt: u32,
    start_ns: u64,
    end_ns: u64,
}

fn runs(out: &Path) -> Vec<Run> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields[..] {
                [queue, id, attempt, start, end] => Some(Run {
                    queue: queue.to_owned(),
                    id: id.to_owned(),
                    attempt: attempt.parse().ok()?,
                    start_ns: start.parse().ok()?,
                    end_ns: end.parse().ok()?,
                }),
                _ => None,
            }
        })
        .collect()
}

/// The most runs of each key at one instant.
fn most_at_once_per_key(runs: &[&Run]) -> BTreeMap<String, usize> {
    let mut events: BTreeMap<String, Vec<(u64, i32)>> = BTreeMap::new();
    for run in runs {
        let key = delayq_storage::flow_key_of(&run.id)
            .unwrap_or("-")
            .to_owned();
        let entry = events.entry(key).or_default();
        entry.push((run.start_ns, 1));
        entry.push((run.end_ns, -1));
    }
    events
        .into_iter()
        .map(|(key, mut events)| {
            events.sort();
            let (mut running, mut most) = (0i32, 0i32);
            for (_, change) in events {
                running += change;
                most = most.max(running);
            }
            (key, most as usize)
        })
        .collect()
}

#[test]
fn per_key_bounds_hold_across_three_node_processes_by_the_handlers_own_clocks() {
    let env = Env::start(QUEUES);
    let script = env.dir.path().join("handler.sh");
    std::fs::write(&script, SCRIPT).expect("write the handler script");
    let out = env.dir.path().join("runs.txt");
    let _nodes: Vec<NodeProcess> = (0..3)
        .map(|index| {
            let mut command = env.command(&["node", "--handler", "exec", "--", "/bin/sh"]);
            command.arg(&script).env("E2E_OUT", &out);
            NodeProcess::spawn(&format!("node-{index}"), command)
        })
        .collect();
    env.wait_for_members(3);

    // hooks: 4 keys of 8 tasks, all due at once; ledger: one key of 6 tasks, 1 ms apart.
    let due = now_ms() + 1_500;
    let hooks: String = (0..4)
        .flat_map(|key| (0..8).map(move |n| (key, n)))
        .map(|(key, n)| format!("{{\"id\":\"hook:{{host-{key}}}:{n:02}\",\"due_ms\":{due}}}\n"))
        .collect();
    common::load_tasks(&env, "hooks", &hooks, 32);
    let ledger: String = (0..6)
        .map(|n| format!("{{\"id\":\"acct:{{a}}:{n:02}\",\"due_ms\":{}}}\n", due + n))
        .collect();
    common::load_tasks(&env, "ledger", &ledger, 6);
    wait_until(
        Duration::from_secs(30),
        "every run was recorded",
        || runs(&out).len() == 32 + 7,
        || format!("{} runs", runs(&out).len()),
    );
    let all = runs(&out);

    let hooks: Vec<&Run> = all.iter().filter(|run| run.queue == "hooks").collect();
    let most = most_at_once_per_key(&hooks);
    assert_eq!(most.len(), 4, "{most:?}");
    assert!(
        most.values().all(|&at_once| at_once == 2),
        "per_key_concurrency 2 across 3 processes: {most:?}"
    );
    let distinct: std::collections::BTreeSet<&str> =
        hooks.iter().map(|run| run.id.as_str()).collect();
    assert_eq!(distinct.len(), 32, "each hook ran once");

    let mut ledger: Vec<&Run> = all.iter().filter(|run| run.queue == "ledger").collect();
    ledger.sort_by_key(|run| run.start_ns);
    assert_eq!(
        most_at_once_per_key(&ledger).get("a"),
        Some(&1),
        "{ledger:?}"
    );
    let order: Vec<(&str, u32)> = ledger
        .iter()
        .map(|run| (run.id.as_str(), run.attempt))
        .collect();
    assert_eq!(
        order,
        [
            ("acct:{a}:00", 1),
            ("acct:{a}:01", 1),
            ("acct:{a}:02", 1),
            ("acct:{a}:03", 1),
            ("acct:{a}:03", 2),
            ("acct:{a}:04", 1),
            ("acct:{a}:05", 1),
        ],
        "FIFO: due order, the retry before the next task"
    );
    env.wait_until_settled("hooks", 32, Duration::from_secs(20));
    assert_eq!(env.stats("hooks")["pending"], 0);

    // The other flow_keys setting on the registered queue: refused at start, by name.
    let other = env.dir.path().join("other.yaml");
    let ours = std::fs::read_to_string(&env.config).expect("read the config");
    let theirs = ours.replace(
        "  hooks:\n    flow_keys: true",
        "  hooks:\n    flow_keys: false",
    );
    assert_ne!(ours, theirs);
    std::fs::write(&other, theirs).expect("write the other config");
    let mut command = common::delayq_command(env.dir.path());
    command.arg("--config").arg(&other).arg("node");
    let output = common::run_with_deadline(command, None);
    assert!(
        !output.status.success(),
        "a node with the other setting started"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("hooks") && stderr.contains("flow_keys"),
        "the error names the queue and the key: {stderr}"
    );
}

const GATED: &str = "\
queue_defaults:
  partitions: 4
  timeout: 60s
queues:
  gated:
    flow_keys: true
    per_key_concurrency: 1
";

/// Waits until the file `$E2E_GO` exists.
const GATE: &str = r#"
cat > /dev/null
while [ ! -e "$E2E_GO" ]; do sleep 0.05; done
"#;

/// The `waiting` counts of `delayq keys QUEUE --json`, in the order listed.
fn waiting(keys: &serde_json::Value) -> Vec<u64> {
    keys.as_array()
        .map(|keys| {
            keys.iter()
                .filter_map(|key| key["waiting"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn delayq_keys_lists_the_keys_holding_tasks_back_while_a_handler_blocks() {
    let env = Env::start(GATED);
    let script = env.dir.path().join("gate.sh");
    std::fs::write(&script, GATE).expect("write the handler script");
    let go = env.dir.path().join("go");
    let mut command = env.command(&["node", "--handler", "exec", "--", "/bin/sh"]);
    command.arg(&script).env("E2E_GO", &go);
    let _node = NodeProcess::spawn("gated", command);
    env.wait_for_members(1);

    // Four tasks of acct-1 and two of acct-2, due now: one of each runs, the rest wait.
    let lines: String = (0..4)
        .map(|n| format!("{{\"id\":\"pay:{{acct-1}}:{n}\",\"delay_ms\":0}}\n"))
        .chain((0..2).map(|n| format!("{{\"id\":\"pay:{{acct-2}}:{n}\",\"delay_ms\":0}}\n")))
        .collect();
    common::load_tasks(&env, "gated", &lines, 6);
    wait_until(
        Duration::from_secs(20),
        "acct-1 and acct-2 to hold tasks back",
        || waiting(&env.json(&["keys", "gated", "--json"])) == [3, 1],
        || env.json(&["keys", "gated", "--json"]).to_string(),
    );
    let keys = env.json(&["keys", "gated", "--json"]);
    let now = now_ms();
    for (index, key, waiting) in [(0, "acct-1", 3), (1, "acct-2", 1)] {
        let listed = &keys[index];
        assert_eq!(listed["queue"], "gated", "{keys}");
        assert_eq!(listed["key"], key, "the most waiting first: {keys}");
        assert_eq!(listed["running"], 1, "{keys}");
        assert_eq!(listed["waiting"], waiting, "{keys}");
        let oldest = listed["oldest_due_ms"].as_u64().expect("oldest_due_ms");
        assert!(oldest > 0 && oldest <= now, "{keys}");
    }

    // The table: one row per key under KEY RUNNING WAITING LONGEST_WAIT.
    let output = env.run(&["keys", "gated"]);
    common::assert_success(&output, &["keys", "gated"]);
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["KEY", "RUNNING", "WAITING", "LONGEST_WAIT"],
        "{table}"
    );
    assert_eq!(rows[1][..3], ["acct-1", "1", "3"], "{table}");
    assert_eq!(rows[2][..3], ["acct-2", "1", "1"], "{table}");
    assert!(rows[1][3].ends_with('s'), "a duration: {table}");
    assert_eq!(rows.len(), 3, "{table}");

    // --limit: honoured, and bounded (a usage error, exit 2).
    let first = env.json(&["keys", "gated", "--limit", "1", "--json"]);
    assert_eq!(waiting(&first), [3], "{first}");
    for bad in ["0", "1001", "x"] {
        let output = env.run(&["keys", "gated", "--limit", bad]);
        assert_eq!(output.status.code(), Some(2), "--limit {bad}");
    }
    let output = env.run(&["keys", "nowhere"]);
    common::assert_success(&output, &["keys", "nowhere"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "no flow key holds tasks back in nowhere\n"
    );

    // delayq stats counts them: four held back, in pending and due now too.
    let counts = env.stats("gated");
    assert_eq!(counts["held_back"], 4, "{counts:?}");
    assert_eq!(counts["pending"], 4, "{counts:?}");
    assert_eq!(counts["inflight"], 2, "{counts:?}");
    let output = env.run(&["stats"]);
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(table.contains("HELD_BACK"), "{table}");

    // Let the handlers go: every task runs, nothing is held back any more.
    std::fs::write(&go, "").expect("open the gate");
    env.wait_until_settled("gated", 6, Duration::from_secs(30));
    assert_eq!(
        env.json(&["keys", "gated", "--json"]),
        serde_json::json!([])
    );
    assert_eq!(env.stats("gated")["held_back"], 0);
}
