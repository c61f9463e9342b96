//! `delayq queue pause|resume QUEUE`: queue controls (guarantee 11).

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
    let (queue, pause) = match &command {
        QueueCommand::Pause(arg) => (arg.queue.clone(), true),
        QueueCommand::Resume(arg) => (arg.queue.clone(), false),
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
