//! `delayq keys QUEUE [--limit N]`: on a queue with flow keys, the keys holding tasks back,
//! with their running and waiting counts and how long their earliest waiting task has waited.

use delayq_engine::config::Config;
use delayq_engine::HeldKey;

use super::error::CliResult;
use super::output::{print_json, write_stdout, Table};
use super::values::{self, short_duration};
use super::{close, reader};

/// `delayq keys QUEUE [--limit N]`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Columns: KEY the flow key (the part of the ids between the first { and the next }), RUNNING
its tasks holding a slot (running, or with per_key_order: fifo waiting for a retry), WAITING
its tasks held back (due, waiting for a slot or for per_key_rate), LONGEST_WAIT how long its
earliest-due waiting task has waited. The keys with the most waiting come first.
With --json: one array, [{\"queue\",\"key\",\"running\",\"waiting\",\"oldest_due_ms\",\"longest_wait_ms\"}].")]
pub struct KeysArgs {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,
    /// How many keys to show (1..=1000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
    limit: u16,
}

/// Prints the keys of the queue holding tasks back, the most waiting first (a table, or with
/// `--json` the array of `GET /v1/queues/{queue}/keys`).
pub async fn run(args: KeysArgs, json: bool, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler
        .held_keys(&args.queue, usize::from(args.limit))
        .await;
    let now_ms = scheduler.now_ms();
    close(scheduler).await;
    let keys = result?;
    if json {
        return print_json(&delayq_http::json::held_keys(&args.queue, &keys, now_ms));
    }
    write_stdout(&keys_table(&args.queue, &keys, now_ms))
}

/// The table of `delayq keys`, or a line saying that no key holds tasks back.
fn keys_table(queue: &str, keys: &[HeldKey], now_ms: u64) -> String {
    if keys.is_empty() {
        return format!("no flow key holds tasks back in {queue}\n");
    }
    let mut table = Table::new(&[
        ("KEY", false),
        ("RUNNING", true),
        ("WAITING", true),
        ("LONGEST_WAIT", true),
    ]);
    for key in keys {
        table.row(vec![
            key.key.clone(),
            key.running.to_string(),
            key.waiting.to_string(),
            short_duration(now_ms.saturating_sub(key.oldest_due_ms)),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_as_a_table_with_the_longest_wait() {
        let keys = [
            HeldKey {
                key: "customer-7".to_owned(),
                running: 1,
                waiting: 12,
                oldest_due_ms: 1_000,
            },
            HeldKey {
                key: "b".to_owned(),
                running: 2,
                waiting: 3,
                oldest_due_ms: 180_000,
            },
        ];
        assert_eq!(
            keys_table("hooks", &keys, 185_000),
            "KEY         RUNNING  WAITING  LONGEST_WAIT\n\
             customer-7        1       12         3m 4s\n\
             b                 2        3          5.0s\n"
        );
        assert_eq!(
            keys_table("hooks", &[], 0),
            "no flow key holds tasks back in hooks\n"
        );
    }
}
