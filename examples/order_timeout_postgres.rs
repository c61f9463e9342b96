//! The order timeout, transactional: each order row and its timeout task are written in one
//! PostgreSQL transaction, so a crash between the two can leave neither an unpaid order that
//! never times out nor a timeout for an order that was never stored.
//!
//! The example creates `--orders` orders; the transaction of every third one fails after the
//! schedule (here: on purpose, with a rollback) and leaves no order and no task. Every other
//! order is unpaid, so its timeout fires; the handler marks it `cancelled` in the same table.
//! At the end the example checks that exactly the committed orders timed out.
//!
//! Run it on a PostgreSQL you may write to (its tables go into a fresh schema, dropped at the
//! end):
//!
//! ```text
//! cargo run --example order_timeout_postgres -- --postgres postgres://user:pw@127.0.0.1/app
//! DELAYQ_POSTGRES_URL=postgres://user:pw@127.0.0.1/app cargo run --example order_timeout_postgres
//! ```

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use delayq::config::{Backend, Config};
use delayq::postgres::tokio_postgres::{self, NoTls};
use delayq::{ScheduleRequest, Scheduler, Task, When};

const QUEUE: &str = "order-timeout";

/// Orders and their timeouts, written in one transaction.
#[derive(Parser, Debug)]
struct Args {
    /// The PostgreSQL to use (a libpq URI).
    #[arg(long, env = "DELAYQ_POSTGRES_URL", value_name = "URL")]
    postgres: String,
    /// How long an order may stay unpaid (30m in production).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// How many orders to try; the transaction of every third one rolls back.
    #[arg(long, default_value_t = 6)]
    orders: u32,
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
    // delayq's tables and the example's own `orders` table share one fresh schema.
    let schema = format!("order_example_{}", std::process::id());
    let mut config = Config {
        backend: Backend::Postgres,
        ..Config::default()
    };
    config.postgres.url = args.postgres.clone();
    config.postgres.schema = schema.clone();
    config.node.name = "order-service".to_owned();

    // The application's own connection, as a service has one (or a pool of them).
    let (mut client, connection) = tokio_postgres::connect(&args.postgres, NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("application connection: {error}");
        }
    });

    let fired = Arc::new(Mutex::new(BTreeSet::new()));
    let record = fired.clone();
    let handler_url = args.postgres.clone();
    let table = format!("{schema}.orders");
    let started = Instant::now();
    let scheduler = Scheduler::builder(config)
        .handler(QUEUE, move |task: Task| {
            let record = record.clone();
            let url = handler_url.clone();
            let table = table.clone();
            async move {
                let number: i64 = task.id.trim_start_matches("order-").parse()?;
                // The order is still unpaid: cancel it (a real service uses its pool here).
                let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
                tokio::spawn(connection);
                let sql = format!(
                    "UPDATE {table} SET state = 'cancelled' WHERE id = $1 AND state = 'unpaid'"
                );
                let changed = client.execute(&sql, &[&number]).await?;
                println!(
                    "{:>6} ms  order {number} timed out: {}",
                    started.elapsed().as_millis(),
                    if changed == 1 {
                        "cancelled"
                    } else {
                        "already settled"
                    }
                );
                record.lock().map_err(|_| "poisoned")?.insert(number);
                Ok::<(), Error>(())
            }
        })
        .start()
        .await?;

    // The schema exists now (the node migrated it); the example adds its own table.
    client
        .batch_execute(&format!(
            "CREATE TABLE {schema}.orders (id bigint PRIMARY KEY, state text NOT NULL)"
        ))
        .await?;

    let mut committed = BTreeSet::new();
    for number in 1..=i64::from(args.orders) {
        let tx = client.transaction().await?;
        tx.execute(
            &format!("INSERT INTO {schema}.orders (id, state) VALUES ($1, 'unpaid')"),
            &[&number],
        )
        .await?;
        let timeout = ScheduleRequest::new(
            format!("order-{number}"),
            When::In(args.timeout),
            format!("{{\"order\":{number}}}"),
        );
        scheduler.schedule_in_tx(&tx, QUEUE, timeout).await?;
        if number % 3 == 0 {
            // Something after the schedule failed (a payment provider said no, a constraint,
            // a crash): the order and its timeout go together.
            tx.rollback().await?;
            println!("order {number}: rolled back (no order, no timeout)");
        } else {
            tx.commit().await?;
            committed.insert(number);
            println!("order {number}: created with its timeout in one transaction");
        }
    }

    // Wait for the committed timeouts, and a little longer for any that should not fire.
    let deadline = Instant::now() + args.timeout + Duration::from_secs(10);
    while fired.lock().map_err(|_| "poisoned")?.len() < committed.len() && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    scheduler.shutdown().await?;
    let fired = fired.lock().map_err(|_| "poisoned")?.clone();
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;

    println!("committed orders {committed:?}; timed out {fired:?}");
    if fired != committed {
        return Err(format!(
            "expected exactly the committed orders {committed:?} to time out, got {fired:?}"
        )
        .into());
    }
    println!("only the committed orders timed out");
    Ok(())
}
