//! `delayq stats [--watch [INTERVAL]]`: per-queue counts.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use delayq_engine::config::Config;
use delayq_engine::Scheduler;
use delayq_storage::PartitionStats;
use serde_json::Value;

use super::error::CliResult;
use super::output::{print_json, write_stdout, Table};
use super::{close, reader, values};

/// The arguments of `delayq stats`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Columns: PENDING tasks waiting (due or not), DUE_NOW pending tasks already due, INFLIGHT
claimed and running, DEAD dead letters, DONE completed tasks kept for dedup, HELD_BACK due
tasks waiting for their flow key (counted in PENDING and DUE_NOW too; `delayq keys QUEUE`
names the keys), PAUSED whether `delayq queue pause` stopped its fires.
With --json: one object per refresh, {\"<queue>\":{\"pending\",\"due_now\",\"inflight\",\"dead\",\"done\",\"held_back\",\"paused\"}}.")]
pub struct StatsArgs {
    /// Refresh every INTERVAL (default 2s) until Ctrl-C.
    #[arg(
        long,
        value_name = "INTERVAL",
        num_args = 0..=1,
        default_missing_value = "2s",
        value_parser = values::duration
    )]
    watch: Option<Duration>,
}

/// Prints the counts once, or every interval with `--watch`.
pub async fn run(args: StatsArgs, json: bool, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = match args.watch {
        None => print_once(&scheduler, json, Refresh::Once).await,
        Some(interval) => watch(&scheduler, json, interval).await,
    };
    close(scheduler).await;
    result
}

async fn watch(scheduler: &Scheduler, json: bool, interval: Duration) -> CliResult<()> {
    let refresh = if !json && std::io::stdout().is_terminal() {
        Refresh::InPlace
    } else {
        Refresh::Append
    };
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(100)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => print_once(scheduler, json, refresh).await?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// How a table is printed: once, redrawn in place (a terminal), or appended after a blank
/// line (a pipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refresh {
    Once,
    InPlace,
    Append,
}

async fn print_once(scheduler: &Scheduler, json: bool, refresh: Refresh) -> CliResult<()> {
    let stats = scheduler.stats().await?;
    let paused = scheduler.paused_queues().await?;
    if json {
        return print_json(&stats_json(&stats, &paused));
    }
    let table = stats_table(&stats, &paused);
    let text = match refresh {
        Refresh::Once => table,
        // Clear the screen and go home, so the table is redrawn in place.
        Refresh::InPlace => format!("\x1b[2J\x1b[H{table}"),
        Refresh::Append => format!("{table}\n"),
    };
    write_stdout(&text)
}

fn stats_json(stats: &BTreeMap<String, PartitionStats>, paused: &[String]) -> Value {
    delayq_http::json::stats(stats, paused)
}

fn stats_table(stats: &BTreeMap<String, PartitionStats>, paused: &[String]) -> String {
    if stats.is_empty() {
        return "no queues yet\n".to_owned();
    }
    let mut table = Table::new(&[
        ("QUEUE", false),
        ("PENDING", true),
        ("DUE_NOW", true),
        ("INFLIGHT", true),
        ("DEAD", true),
        ("DONE", true),
        ("HELD_BACK", true),
        ("PAUSED", false),
    ]);
    for (queue, counts) in stats {
        table.row(vec![
            queue.clone(),
            counts.pending.to_string(),
            counts.due_now.to_string(),
            counts.inflight.to_string(),
            counts.dead.to_string(),
            counts.done.to_string(),
            counts.held_back.to_string(),
            if paused.contains(queue) { "yes" } else { "no" }.to_owned(),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_print_as_json_by_queue_and_as_a_table() {
        let mut stats = BTreeMap::new();
        stats.insert(
            "orders".to_owned(),
            PartitionStats {
                pending: 3,
                due_now: 1,
                inflight: 2,
                dead: 0,
                done: 9,
                held_back: 1,
            },
        );
        assert_eq!(
            stats_json(&stats, &[]),
            serde_json::json!({"orders": {"pending": 3, "due_now": 1, "inflight": 2, "dead": 0, "done": 9, "held_back": 1, "paused": false}})
        );
        assert_eq!(
            stats_json(&stats, &["orders".to_owned()])["orders"]["paused"],
            true
        );
        let table = stats_table(&stats, &[]);
        assert!(table.starts_with("QUEUE   PENDING"), "{table}");
        assert_eq!(
            table,
            "QUEUE   PENDING  DUE_NOW  INFLIGHT  DEAD  DONE  HELD_BACK  PAUSED\n\
             orders        3        1         2     0     9          1  no\n"
        );
    }
}
