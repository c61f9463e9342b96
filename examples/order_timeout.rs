//! An order service: every new order gets a cancellation task `--timeout` ahead (30 minutes in
//! production, 3 seconds here so the example ends quickly). When the payment arrives first, the
//! task is cancelled; an order still unpaid when its task fires is cancelled by the handler.
//!
//! Run it:
//!
//! ```text
//! cargo run --example order_timeout                              # in memory, no Redis needed
//! cargo run --example order_timeout -- --timeout 5s --orders 10
//! cargo run --example order_timeout -- --redis redis://127.0.0.1:6379/0
//! ```
//!
//! With `--redis`, the example runs its own node under a fresh key prefix, so `delayq node`
//! processes on the same Redis do not take its tasks.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use delayq::config::Config;
use delayq::{MemoryBackend, Scheduler, Task, When};
use serde::{Deserialize, Serialize};

const QUEUE: &str = "order-timeout";

/// Cancels unpaid orders after a timeout; payments cancel the timeout.
#[derive(Parser, Debug)]
struct Args {
    /// How long an order may stay unpaid (30m in production).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// How many orders to create; every other one gets paid in time.
    #[arg(long, default_value_t = 6)]
    orders: u32,
    /// Use this Redis instead of the in-memory backend.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

/// What the cancellation task carries.
#[derive(Serialize, Deserialize, Debug)]
struct Order {
    number: u32,
    amount_cents: u64,
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
    config.node.name = "order-service".to_owned();
    let builder = match &args.redis {
        Some(url) => {
            config.redis.url = url.clone();
            config.redis.key_prefix = format!("delayq-example-{}", std::process::id());
            Scheduler::builder(config)
        }
        None => Scheduler::builder(config).memory(MemoryBackend::new()),
    };

    // The handler runs when an order's timeout expires: the order is still unpaid.
    let cancelled = Arc::new(Mutex::new(BTreeSet::new()));
    let started = Instant::now();
    let record = cancelled.clone();
    let scheduler = builder
        .handler(QUEUE, move |task: Task| {
            let record = record.clone();
            async move {
                let order: Order = task.json()?;
                println!(
                    "{:>6.2}s  order {} ({} cents) still unpaid after the timeout: cancelled (fired {} ms late)",
                    started.elapsed().as_secs_f64(),
                    order.number,
                    order.amount_cents,
                    task.lateness().as_millis()
                );
                record
                    .lock()
                    .map_err(|_| "the record is poisoned")?
                    .insert(order.number);
                Ok::<(), Error>(())
            }
        })
        .start()
        .await?;

    // New orders: each schedules its own cancellation.
    for number in 1..=args.orders {
        let order = Order {
            number,
            amount_cents: 1_000 + u64::from(number) * 250,
        };
        let id = format!("order-{number}");
        scheduler
            .schedule_json(QUEUE, &id, When::In(args.timeout), &order)
            .await?;
    }
    println!(
        "created {} orders; each is cancelled unless paid within {}",
        args.orders,
        humantime::format_duration(args.timeout)
    );

    // Payments arrive for the even-numbered orders, before the timeout: cancel their task.
    let paid: Vec<u32> = (1..=args.orders).filter(|n| n % 2 == 0).collect();
    for (index, number) in paid.iter().enumerate() {
        let fraction = (index as f64 + 1.0) / (paid.len() as f64 + 1.0);
        tokio::time::sleep_until((started + args.timeout.mul_f64(fraction * 0.8)).into()).await;
        let removed = scheduler
            .cancel(QUEUE, &format!("order-{number}"))
            .await?
            .cancelled();
        println!(
            "{:>6.2}s  payment for order {number} arrived: timeout cancelled ({removed})",
            started.elapsed().as_secs_f64()
        );
    }

    // Wait for the unpaid orders' timeouts to fire.
    let unpaid = args.orders as usize - paid.len();
    let deadline = started + args.timeout + Duration::from_secs(10);
    while cancelled.lock().map_err(|_| "poisoned")?.len() < unpaid && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    scheduler.shutdown().await?;
    let cancelled = cancelled.lock().map_err(|_| "poisoned")?.clone();
    println!("paid: {paid:?}; cancelled for lack of payment: {cancelled:?}");
    if cancelled.len() != unpaid || paid.iter().any(|n| cancelled.contains(n)) {
        return Err("unexpected outcome: see above".into());
    }
    Ok(())
}
