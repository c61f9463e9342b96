//! Device liveness: every heartbeat of a device pushes its "offline" deadline forward by
//! scheduling the same task id again (an upsert replaces the pending task). A device that
//! stays silent for `--deadline` lets its task fire: it is reported offline.
//!
//! Run it:
//!
//! ```text
//! cargo run --example device_offline                               # in memory, no Redis needed
//! cargo run --example device_offline -- --deadline 500ms --devices 6
//! cargo run --example device_offline -- --redis redis://127.0.0.1:6379/0
//! ```
//!
//! The simulation: each device sends a heartbeat every 200 ms; device 1 keeps going for the
//! whole run, device 2 goes silent after 1 s, device 3 after 2 s, and so on. The run lasts 4 s.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use delayq::config::Config;
use delayq::{MemoryBackend, Scheduler, Task, When};

const QUEUE: &str = "device-offline";
const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);
const RUN_FOR: Duration = Duration::from_secs(4);

/// Reports devices whose heartbeats stopped.
#[derive(Parser, Debug)]
struct Args {
    /// A device silent for this long is offline.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// How many devices to simulate.
    #[arg(long, default_value_t = 4)]
    devices: u32,
    /// Use this Redis instead of the in-memory backend.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
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
    config.node.name = "device-monitor".to_owned();
    let builder = match &args.redis {
        Some(url) => {
            config.redis.url = url.clone();
            config.redis.key_prefix = format!("delayq-example-{}", std::process::id());
            Scheduler::builder(config)
        }
        None => Scheduler::builder(config).memory(MemoryBackend::new()),
    };

    let started = Instant::now();
    let offline: Arc<Mutex<BTreeMap<String, Duration>>> = Arc::default();
    let record = offline.clone();
    let scheduler = builder
        .handler(QUEUE, move |task: Task| {
            let record = record.clone();
            async move {
                let last_heartbeat = String::from_utf8_lossy(&task.payload).into_owned();
                println!(
                    "{:>5.2}s  {} is OFFLINE (last heartbeat at {last_heartbeat})",
                    started.elapsed().as_secs_f64(),
                    task.id
                );
                record
                    .lock()
                    .map_err(|_| "the record is poisoned")?
                    .insert(task.id.clone(), started.elapsed());
                Ok::<(), Error>(())
            }
        })
        .start()
        .await?;

    // Device n (1-based) goes silent after (n - 1) seconds; device 1 never does.
    let silent_after =
        |device: u32| (device > 1).then(|| Duration::from_secs(u64::from(device - 1)));
    let mut renewals = 0u32;
    let mut ticks = tokio::time::interval(HEARTBEAT_EVERY);
    while started.elapsed() < RUN_FOR {
        ticks.tick().await;
        for device in 1..=args.devices {
            if silent_after(device).is_some_and(|after| started.elapsed() >= after) {
                continue;
            }
            let stamp = format!("{:.2}s", started.elapsed().as_secs_f64());
            let scheduled = scheduler
                .schedule(
                    QUEUE,
                    &format!("device-{device}"),
                    When::In(args.deadline),
                    stamp,
                )
                .await?;
            renewals += u32::from(scheduled.replaced);
        }
    }
    println!("{renewals} heartbeats pushed a pending deadline forward (upsert)");

    // The run is over: the devices still online are not going to be reported.
    let offline = offline.lock().map_err(|_| "poisoned")?.clone();
    for device in 1..=args.devices {
        let id = format!("device-{device}");
        if !offline.contains_key(&id) {
            scheduler.cancel(QUEUE, &id).await?;
        }
    }
    scheduler.shutdown().await?;
    let expected: Vec<String> = (1..=args.devices)
        .filter(|device| silent_after(*device).is_some_and(|after| after + args.deadline < RUN_FOR))
        .map(|device| format!("device-{device}"))
        .collect();
    println!("reported offline: {:?}", offline.keys().collect::<Vec<_>>());
    if expected.iter().any(|device| !offline.contains_key(device))
        || offline.contains_key("device-1")
    {
        return Err(format!(
            "expected exactly {expected:?} (and maybe devices silent near the end) offline"
        )
        .into());
    }
    Ok(())
}
