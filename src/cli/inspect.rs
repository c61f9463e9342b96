//! `delayq cancel`, `delayq get` and `delayq nodes`.

use delayq_coordinator::QueueFilter;
use delayq_engine::config::Config;

use super::error::{CliError, CliResult};
use super::output::{print_json, write_stdout, Table};
use super::values::short_duration;
use super::{close, producer, reader, values};

/// A task named by its queue and id.
#[derive(Debug, clap::Args)]
pub struct TaskRef {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,
    /// The task's id.
    #[arg(value_name = "ID", value_parser = values::task_id)]
    id: String,
}

/// Cancels the task; prints `{"cancelled":true|false}`, with `"state":"inflight"` when its
/// handler was already running (guarantee 7).
pub async fn cancel(task: TaskRef, config: Config) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = scheduler.cancel(&task.queue, &task.id).await;
    close(scheduler).await;
    print_json(&delayq_http::json::cancelled(result?))
}

/// Prints the task as one JSON line, or fails with `not found`.
pub async fn get(task: TaskRef, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler.get(&task.queue, &task.id).await;
    close(scheduler).await;
    let Some(info) = result? else {
        return Err(CliError::Runtime(format!(
            "task {:?} not found in queue {:?}",
            task.id, task.queue
        )));
    };
    print_json(&delayq_http::json::task(&task.queue, &info))
}

/// Lists the live nodes with the partitions each owns.
pub async fn nodes(json: bool, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler.nodes().await;
    let now_ms = scheduler.now_ms();
    close(scheduler).await;
    let nodes = result?;
    if json {
        return print_json(&delayq_http::json::nodes(&nodes));
    }
    if nodes.is_empty() {
        return write_stdout("no live nodes\n");
    }
    let mut table = Table::new(&[
        ("ID", false),
        ("NAME", false),
        ("HOST", false),
        ("PID", true),
        ("VERSION", false),
        ("UP", true),
        ("HEARTBEAT", true),
        ("QUEUES", false),
        ("PARTITIONS", true),
    ]);
    for status in &nodes {
        let node = &status.info;
        table.row(vec![
            node.id.to_string(),
            node.name.clone(),
            node.host.clone(),
            node.pid.to_string(),
            node.version.clone(),
            short_duration(now_ms.saturating_sub(node.started_ms)),
            format!("{} ago", short_duration(status.heartbeat_age_ms)),
            queue_filter_text(&node.queues),
            status.partitions.to_string(),
        ]);
    }
    write_stdout(&table.render())
}

fn queue_filter_text(filter: &QueueFilter) -> String {
    match filter {
        QueueFilter::All => "*".to_owned(),
        QueueFilter::Only(queues) => queues.join(","),
    }
}
