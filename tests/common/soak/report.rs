//! The soak's report: the parameters, the machine, and the checker's counts and violations,
//! as Markdown (RELIABILITY.md quotes it).

use std::fmt::Write as _;

use super::checker::{Verdict, CALM_BEFORE_MS};
use super::history::{FaultKind, History, OpKind};

/// What the machine was doing during the run.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// `nproc`.
    pub cores: usize,
    /// 1-minute load averages sampled during the run.
    pub load: Vec<f64>,
    /// `uname -sr`.
    pub kernel: String,
    /// `redis-server --version`, first words.
    pub redis: String,
}

impl Machine {
    /// Reads the static facts; the load is sampled by [`Machine::sample`].
    pub fn read() -> Self {
        let output = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        Machine {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            load: Vec::new(),
            kernel: output("uname", &["-sr"]),
            redis: output("redis-server", &["--version"])
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// The 1-minute load average now.
    pub fn sample() -> Option<f64> {
        std::fs::read_to_string("/proc/loadavg")
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

/// A UTC date and time from epoch milliseconds (civil-from-days, no dependency).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1_000;
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// The report of `verdict` on `history`.
pub fn render(history: &History, verdict: &Verdict, machine: &Machine, command: &str) -> String {
    let counts = &verdict.counts;
    let params = &history.params;
    let mut text = String::new();
    let secs = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1_000.0;
    let _ = writeln!(text, "### Soak run of {}\n", utc(history.started.wall_ms));
    let _ = writeln!(text, "- command: `{command}`");
    let _ = writeln!(
        text,
        "- parameters: {} s of load and faults, {} nodes, {} producers aiming at {} ops/s (achieved {:.1}: each producer waits for its answers), seed {}, topology {}, handler hold 0–{} ms, lease {} ms, heartbeat TTL {} ms",
        params.secs,
        params.nodes,
        params.producers,
        params.rate,
        counts.ops_total as f64
            / secs(history.started.wall_ms, history.load_ended.wall_ms).max(0.001),
        params.seed,
        if params.sentinel {
            "Sentinel (1 master, 2 replicas, 3 sentinels; `wait_replicas: 2`)"
        } else {
            "one redis-server (`appendonly yes`, `appendfsync always`), a fault proxy per node"
        },
        params.hold_max_ms,
        params.lease_ms,
        params.ttl_ms
    );
    let load = &machine.load;
    let (low, high) = load.iter().fold((f64::MAX, 0.0f64), |(low, high), &l| {
        (low.min(l), high.max(l))
    });
    let mean = if load.is_empty() {
        0.0
    } else {
        load.iter().sum::<f64>() / load.len() as f64
    };
    let _ = writeln!(
        text,
        "- machine: {} cores, {}, {}; 1-minute load during the run {:.2}–{:.2} (mean {:.2}, {} samples; the machine is shared)",
        machine.cores,
        machine.kernel,
        machine.redis,
        if load.is_empty() { 0.0 } else { low },
        high,
        mean,
        load.len()
    );
    let _ = writeln!(
        text,
        "- wall time: load {:.1} s, settling {:.1} s",
        secs(history.started.wall_ms, history.load_ended.wall_ms),
        secs(history.load_ended.wall_ms, history.ended.wall_ms)
    );
    let _ = writeln!(
        text,
        "- clocks: every time is the harness's (this machine's clock, which Redis `TIME` reads too); the wall clock moved against the monotonic one by {} ms over the run; \"early\" is a fire received more than 1 ms before its due",
        counts.clock_step_ms
    );
    let _ = writeln!(
        text,
        "\n**Result: lost {}, early {}, violations {}.**\n",
        counts.lost,
        counts.early,
        verdict.violations.len()
    );

    let _ = writeln!(text, "| operation | answers | total |");
    let _ = writeln!(text, "|---|---|---|");
    for kind in OpKind::ALL {
        let answers: Vec<String> = counts
            .ops
            .iter()
            .filter(|((name, _), _)| *name == kind.name())
            .map(|((_, class), count)| format!("{class} {count}"))
            .collect();
        let total: u64 = counts
            .ops
            .iter()
            .filter(|((name, _), _)| *name == kind.name())
            .map(|(_, count)| count)
            .sum();
        let _ = writeln!(
            text,
            "| {} | {} | {total} |",
            kind.name(),
            answers.join(", ")
        );
    }
    let _ = writeln!(text, "| all | | {} |\n", counts.ops_total);

    let _ = writeln!(text, "| fault | count | total s | longest s |");
    let _ = writeln!(text, "|---|---|---|---|");
    for kind in FaultKind::ALL {
        if let Some((count, total, longest)) = counts.faults.get(&kind) {
            let _ = writeln!(
                text,
                "| {} | {count} | {:.1} | {:.1} |",
                kind.name(),
                *total as f64 / 1_000.0,
                *longest as f64 / 1_000.0
            );
        }
    }
    let faults: u64 = counts.faults.values().map(|(count, _, _)| count).sum();
    let _ = writeln!(text, "| all | {faults} | | |\n");

    let fates: Vec<String> = counts
        .fates
        .iter()
        .map(|(fate, count)| format!("{fate} {count}"))
        .collect();
    let _ = writeln!(
        text,
        "- tasks (one id at one due): {} — {}; fired {}",
        counts.groups,
        fates.join(", "),
        counts.fired_groups
    );
    let _ = writeln!(
        text,
        "- fires received: {} (node processes: {})",
        counts.fires, counts.node_lives
    );
    let _ = writeln!(text, "- lost: {}", counts.lost);
    let _ = writeln!(
        text,
        "- early: {} (earliest fire {} ms after its due)",
        counts.early, counts.earliest_ms
    );
    let why = |map: &std::collections::BTreeMap<FaultKind, u64>| -> String {
        if map.is_empty() {
            return "none".to_owned();
        }
        map.iter()
            .map(|(kind, count)| format!("{count} at a {}", kind.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let repeats: u64 = counts.repeats.values().sum();
    let _ = writeln!(
        text,
        "- repeats: {repeats} ({}), each a fire whose node was hit by that fault while it ran",
        why(&counts.repeats)
    );
    let undone: u64 = counts.undone.values().sum();
    let _ = writeln!(
        text,
        "- fires undone (the run was cut short by a fault and a later `cancelled: true` found the task pending again): {undone} ({})",
        why(&counts.undone)
    );
    let _ = writeln!(
        text,
        "- repeats or undone fires with no fault to explain them: {}",
        counts.unexplained
    );
    let _ = writeln!(
        text,
        "- dedup: {} resends answered `duplicate` (none of them fired)",
        counts.duplicates
    );
    let _ = writeln!(
        text,
        "- replaced after their due came, so the run went on beside the new schedule: {}; runs under way at a `cancelled: true` that reached the harness after its answer: {}",
        counts.raced_replaces, counts.inflight_across_cancel
    );
    let late = &counts.lateness;
    let _ = writeln!(
        text,
        "- lateness (first fire received minus due) over {} fired tasks whose first schedule was answered: p50 {} ms, p90 {} ms, p99 {} ms, max {} ms; away from faults ({} tasks with no fault active from {} ms before the due to the fire): p99 {} ms, max {} ms",
        late.count, late.p50, late.p90, late.p99, late.max, late.calm_count, CALM_BEFORE_MS, late.calm_p99, late.calm_max
    );
    let _ = writeln!(
        text,
        "- node clocks: a node's `fired_ms` was at most {} ms ahead of the harness's receive time",
        counts.node_clock_ahead_ms
    );
    if !verdict.violations.is_empty() {
        let _ = writeln!(text, "\n#### Violations (first 20)\n\n```");
        for violation in verdict.violations.iter().take(20) {
            let _ = writeln!(
                text,
                "[{}] {}/{}: {}",
                violation.rule.name(),
                violation.queue,
                violation.id,
                violation.detail
            );
        }
        let _ = writeln!(text, "```");
    }
    text
}
