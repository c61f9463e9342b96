//! `delayq cancel`, `delayq get` and `delayq nodes`.

use std::collections::BTreeMap;

use delayq_coordinator::{owned_partitions, Member, NodeInfo, QueueFilter};
use delayq_engine::config::Config;
use serde_json::{json, Map, Value};

use super::error::{CliError, CliResult};
use super::output::{print_json, write_stdout, Table};
use super::values::{insert_payload, short_duration};
use super::{close, producer, values};

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
    let outcome = result?;
    match outcome.state() {
        Some(state) => print_json(&json!({ "cancelled": outcome.cancelled(), "state": state })),
        None => print_json(&json!({ "cancelled": outcome.cancelled() })),
    }
}

/// Prints the task as one JSON line, or fails with `not found`.
pub async fn get(task: TaskRef, config: Config) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = scheduler.get(&task.queue, &task.id).await;
    close(scheduler).await;
    let Some(info) = result? else {
        return Err(CliError::Runtime(format!(
            "task {:?} not found in queue {:?}",
            task.id, task.queue
        )));
    };
    let mut object = Map::new();
    object.insert("queue".to_owned(), Value::from(task.queue));
    object.insert("id".to_owned(), Value::from(info.id.as_str()));
    object.insert("state".to_owned(), Value::from(info.state.as_str()));
    object.insert("due_ms".to_owned(), Value::from(info.due_ms));
    object.insert("attempt".to_owned(), Value::from(info.attempt));
    object.insert("generation".to_owned(), Value::from(info.generation));
    insert_payload(&mut object, &info.payload);
    object.insert("last_error".to_owned(), Value::from(info.last_error));
    object.insert(
        "state_since_ms".to_owned(),
        Value::from(info.state_since_ms),
    );
    print_json(&Value::Object(object))
}

/// Lists the live nodes with the partitions each owns.
pub async fn nodes(json: bool, config: Config) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = async {
        let nodes = scheduler.coordinator().nodes().await?;
        let queues = scheduler.store().queues().await?;
        Ok::<_, CliError>((nodes, queues))
    }
    .await;
    let membership = scheduler.membership();
    let now_ms = scheduler.now_ms();
    close(scheduler).await;
    let (nodes, queues) = result?;
    // The members are the live nodes (a node whose heartbeat expired is removed from the
    // membership by the others); registry entries outside it are leftovers being cleaned up.
    let members: Vec<Member> = membership.members;
    let live: Vec<&NodeInfo> = nodes
        .iter()
        .filter(|node| members.iter().any(|member| member.id == node.id))
        .collect();
    let queues: Vec<(String, u32)> = queues
        .into_iter()
        .map(|(queue, partitions)| (queue.as_str().to_owned(), partitions))
        .collect();
    let rows: Vec<NodeRow> = live
        .into_iter()
        .map(|node| NodeRow::new(node, &queues, &members))
        .collect();
    if json {
        let array: Vec<Value> = rows.iter().map(NodeRow::to_json).collect();
        return print_json(&Value::Array(array));
    }
    if rows.is_empty() {
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
    for row in &rows {
        let node = row.node;
        table.row(vec![
            node.id.to_string(),
            node.name.clone(),
            node.host.clone(),
            node.pid.to_string(),
            node.version.clone(),
            short_duration(now_ms.saturating_sub(node.started_ms)),
            format!(
                "{} ago",
                short_duration(now_ms.saturating_sub(node.last_heartbeat_ms))
            ),
            queue_filter_text(&node.queues),
            row.total.to_string(),
        ]);
    }
    write_stdout(&table.render())
}

/// One node with its partition counts.
struct NodeRow<'a> {
    node: &'a NodeInfo,
    by_queue: BTreeMap<String, usize>,
    total: usize,
}

impl<'a> NodeRow<'a> {
    fn new(node: &'a NodeInfo, queues: &[(String, u32)], members: &[Member]) -> Self {
        let by_queue: BTreeMap<String, usize> = queues
            .iter()
            .map(|(queue, partitions)| {
                let owned = owned_partitions(&node.id, queue, *partitions, members).len();
                (queue.clone(), owned)
            })
            .filter(|(_, owned)| *owned > 0)
            .collect();
        let total = by_queue.values().sum();
        NodeRow {
            node,
            by_queue,
            total,
        }
    }

    fn to_json(&self) -> Value {
        let node = self.node;
        let queues = match &node.queues {
            QueueFilter::All => Value::from("*"),
            QueueFilter::Only(queues) => Value::from(queues.clone()),
        };
        json!({
            "id": node.id.as_str(),
            "name": node.name,
            "host": node.host,
            "pid": node.pid,
            "version": node.version,
            "started_ms": node.started_ms,
            "last_heartbeat_ms": node.last_heartbeat_ms,
            "queues": queues,
            "partitions": self.total,
            "partitions_by_queue": self.by_queue,
        })
    }
}

fn queue_filter_text(filter: &QueueFilter) -> String {
    match filter {
        QueueFilter::All => "*".to_owned(),
        QueueFilter::Only(queues) => queues.join(","),
    }
}
