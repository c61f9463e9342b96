//! `delayq pending`, `delayq dead`, `delayq retry` and `delayq purge`: a queue's upcoming
//! tasks, and its dead letters listed, scheduled again or deleted.

use delayq_engine::config::Config;
use delayq_engine::Scheduler;

use super::error::{CliError, CliResult};
use super::output::{print_json, write_stdout, Table};
use super::values::{self, short_duration};
use super::{close, producer, reader};

/// `delayq pending QUEUE [--limit N]` and `delayq dead QUEUE [--limit N]`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,
    /// How many to show (1..=1000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
    limit: u16,
}

/// `delayq retry QUEUE (ID | --all)` and `delayq purge QUEUE (ID | --all)`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["id", "all"])))]
pub struct DeadRef {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,
    /// The dead letter's id.
    #[arg(value_name = "ID", value_parser = values::task_id)]
    id: Option<String>,
    /// Every dead letter of the queue.
    #[arg(long)]
    all: bool,
}

/// Prints the next pending tasks of the queue by due time, payloads as previews (the table:
/// 40 characters; `--json`: the first 256 bytes with `payload_bytes` and
/// `payload_truncated`); `delayq get` shows a payload whole.
pub async fn pending(args: ListArgs, json: bool, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler
        .pending(&args.queue, usize::from(args.limit))
        .await;
    let now_ms = scheduler.now_ms();
    close(scheduler).await;
    let tasks = result?;
    if json {
        return print_json(&delayq_http::json::pending(&args.queue, &tasks));
    }
    if tasks.is_empty() {
        return write_stdout(&format!("nothing pending in {}\n", args.queue));
    }
    let mut table = Table::new(&[
        ("ID", false),
        ("DUE_IN", true),
        ("DUE_MS", true),
        ("ATTEMPT", true),
        ("PAYLOAD", false),
    ]);
    for task in &tasks {
        let due_in = if task.due_ms <= now_ms {
            "due".to_owned()
        } else {
            short_duration(task.due_ms - now_ms)
        };
        table.row(vec![
            task.id.clone(),
            due_in,
            task.due_ms.to_string(),
            task.attempt.to_string(),
            one_line(&String::from_utf8_lossy(&task.payload), 40),
        ]);
    }
    write_stdout(&table.render())
}

/// Prints the dead letters of the queue with their last error (`--json`: payloads as
/// previews, as for `pending`).
pub async fn dead(args: ListArgs, json: bool, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler
        .dead_letters(&args.queue, usize::from(args.limit))
        .await;
    let now_ms = scheduler.now_ms();
    close(scheduler).await;
    let tasks = result?;
    if json {
        return print_json(&delayq_http::json::dead(&args.queue, &tasks));
    }
    if tasks.is_empty() {
        return write_stdout(&format!("no dead letters in {}\n", args.queue));
    }
    let mut table = Table::new(&[
        ("ID", false),
        ("FAILED", true),
        ("ATTEMPTS", true),
        ("LAST_ERROR", false),
    ]);
    for task in &tasks {
        table.row(vec![
            task.id.as_str().to_owned(),
            format!(
                "{} ago",
                short_duration(now_ms.saturating_sub(task.failed_ms))
            ),
            task.attempt.to_string(),
            one_line(task.last_error.as_deref().unwrap_or(""), 80),
        ]);
    }
    write_stdout(&table.render())
}

/// Schedules dead letters again (due now, attempt 1); prints `{"retried":N}`. An id that is
/// not a dead letter fails (exit 1).
pub async fn retry(args: DeadRef, config: Config) -> CliResult<()> {
    act(args, config, Action::Retry).await
}

/// Deletes dead letters; prints `{"purged":N}`. An id that is not a dead letter fails.
pub async fn purge(args: DeadRef, config: Config) -> CliResult<()> {
    act(args, config, Action::Purge).await
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Purge,
}

async fn act(args: DeadRef, config: Config, action: Action) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = apply(&scheduler, &args, action).await;
    close(scheduler).await;
    let count = result?;
    if let (Some(id), 0) = (&args.id, count) {
        return Err(CliError::Runtime(format!(
            "no dead letter {id:?} in queue {:?}",
            args.queue
        )));
    }
    match action {
        Action::Retry => print_json(&delayq_http::json::retried(count)),
        Action::Purge => print_json(&delayq_http::json::purged(count)),
    }
}

async fn apply(scheduler: &Scheduler, args: &DeadRef, action: Action) -> CliResult<u64> {
    let queue = &args.queue;
    Ok(match (&args.id, action) {
        (Some(id), Action::Retry) => u64::from(scheduler.retry_dead(queue, id).await?),
        (Some(id), Action::Purge) => u64::from(scheduler.purge_dead(queue, id).await?),
        (None, Action::Retry) => scheduler.retry_all_dead(queue).await?,
        (None, Action::Purge) => scheduler.purge_all_dead(queue).await?,
    })
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line
    }
}
