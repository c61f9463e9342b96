//! `delayq queue pause|resume QUEUE`: queue controls (guarantee 11); `delayq queue delete
//! QUEUE [--force]`: the queue and every key of it, gone.

use delayq_engine::config::Config;
use serde_json::json;

use super::error::CliResult;
use super::output::print_json;
use super::{close, producer, values};

/// The subcommands of `delayq queue`.
#[derive(Debug, clap::Subcommand)]
pub enum QueueCommand {
    /// Stop firing the queue's tasks cluster-wide (schedules go on); prints {"queue","paused":true}.
    Pause(QueueArg),
    /// Fire again, the backlog at once; prints {"queue","paused":false}.
    Resume(QueueArg),
    /// Delete the queue: every key of it on every master and its registry entry; nodes stop
    /// serving it within one pull_period. Refused (exit 1, naming the counts) while it holds
    /// pending, in-flight or dead tasks, unless --force. Prints {"queue","deleted":true,"tasks":N}.
    Delete(DeleteArgs),
}

/// `delayq queue delete QUEUE [--force]`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,
    /// Delete it also while it holds pending, in-flight or dead tasks (they are removed).
    #[arg(long)]
    force: bool,
}

/// A queue's name.
#[derive(Debug, clap::Args)]
pub struct QueueArg {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,
}

/// Runs a `delayq queue` subcommand.
pub async fn run(command: QueueCommand, config: Config) -> CliResult<()> {
    let (queue, pause) = match command {
        QueueCommand::Pause(arg) => (arg.queue, true),
        QueueCommand::Resume(arg) => (arg.queue, false),
        QueueCommand::Delete(args) => return delete(args, config).await,
    };
    let scheduler = producer(config).await?;
    let result = if pause {
        scheduler.pause_queue(&queue).await
    } else {
        scheduler.resume_queue(&queue).await
    };
    close(scheduler).await;
    result?;
    print_json(&json!({ "queue": queue, "paused": pause }))
}

/// `delayq queue delete`.
async fn delete(args: DeleteArgs, config: Config) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = scheduler.delete_queue(&args.queue, args.force).await;
    close(scheduler).await;
    let tasks = result?;
    print_json(&delayq_http::json::queue_deleted(&args.queue, tasks))
}
