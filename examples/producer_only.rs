//! A producer: a process that schedules tasks but runs no handlers, so it never joins the
//! cluster or owns partitions. The nodes of the cluster fire what it schedules.
//!
//! Run it:
//!
//! ```text
//! cargo run --example producer_only                  # in memory, with one in-process node
//! cargo run --example producer_only -- --tasks 20
//!
//! # Against a real cluster: start nodes, then produce.
//! delayq node &                                      # (cluster.yaml or DELAYQ_REDIS_URL)
//! cargo run --example producer_only -- --redis redis://127.0.0.1:6379/0
//! ```
//!
//! With `--redis` the producer uses the key prefix of `--key-prefix` (default `delayq`, the
//! default of `delayq node`), and watches its tasks with `get` until the nodes have run them.

use std::time::{Duration, Instant};

use clap::Parser;
use delayq::config::Config;
use delayq::{MemoryBackend, Scheduler, Task, When};

const QUEUE: &str = "reminders";

/// Schedules a few reminders and watches them being done by the cluster's nodes.
#[derive(Parser, Debug)]
struct Args {
    /// How many reminders to schedule (due 0.5 s to 2.5 s ahead).
    #[arg(long, default_value_t = 5)]
    tasks: u32,
    /// Produce into this Redis (where `delayq node` processes run) instead of in memory.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The cluster's key prefix (with --redis).
    #[arg(long, default_value = "delayq")]
    key_prefix: String,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let mut config = Config::default();
    // Only in memory: a node in this process, so that something fires. With Redis, the
    // cluster's `delayq node` processes do that.
    let (producer, node) = match &args.redis {
        Some(url) => {
            config.redis.url = url.clone();
            config.redis.key_prefix = args.key_prefix.clone();
            (Scheduler::builder(config).start().await?, None)
        }
        None => {
            let backend = MemoryBackend::new();
            let node = Scheduler::builder(config.clone())
                .memory(backend.clone())
                .handler(QUEUE, |task: Task| async move {
                    println!(
                        "  node fired {} (due {} ms, {} ms late): {}",
                        task.id,
                        task.due_ms,
                        task.lateness().as_millis(),
                        String::from_utf8_lossy(&task.payload)
                    );
                    Ok::<(), std::convert::Infallible>(())
                })
                .start()
                .await?;
            // No handler: this scheduler is a producer only.
            let producer = Scheduler::builder(config).memory(backend).start().await?;
            (producer, Some(node))
        }
    };

    let ids: Vec<String> = (1..=args.tasks).map(|n| format!("reminder-{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let delay = Duration::from_millis(500 + (n as u64 * 2_000) / u64::from(args.tasks.max(1)));
        let scheduled = producer
            .schedule(
                QUEUE,
                id,
                When::In(delay),
                format!("call the dentist (#{})", n + 1),
            )
            .await?;
        println!("scheduled {}", serde_json::to_string(&scheduled)?);
    }

    // Watch the tasks through the store until every one is done (or the wait runs out).
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut states = Vec::new();
    while Instant::now() < deadline {
        states.clear();
        for id in &ids {
            let state = producer.get(QUEUE, id).await?;
            states.push(state.map_or("gone".to_owned(), |task| task.state.as_str().to_owned()));
        }
        if states
            .iter()
            .all(|state| state == "done" || state == "gone")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("states: {states:?}");
    producer.shutdown().await?;
    if let Some(node) = node {
        node.shutdown().await?;
    }
    if states
        .iter()
        .any(|state| state == "pending" || state == "inflight")
    {
        return Err(format!(
            "some reminders were not run: is a `delayq node` running against this Redis with key prefix {:?}?",
            args.key_prefix
        )
        .into());
    }
    Ok(())
}
