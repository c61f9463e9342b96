//! `delayq recurring set|list|get|delete|pause|resume|next`: recurring schedules.
//!
//! `set` takes the spec as flags and validates it before connecting (a bad expression, zone,
//! duration or window is a usage error, exit 2, and nothing is stored); `next` previews the
//! ticks of a cadence without Redis, with the same calendar the nodes use.

use delayq_engine::config::Config;
use delayq_engine::recurring::{Cadence, Calendar, RawSpec, ScheduleName};
use serde_json::json;

use super::error::{CliError, CliResult};
use super::output::{print_json, write_stdout, Table};
use super::{close, producer, reader};

pub(crate) const RECURRING_EXAMPLES: &str = "\
Examples:
  delayq recurring set nightly-report --queue reports --cron '0 9 * * *' --tz Europe/Berlin
  delayq recurring set sweep-carts --queue carts --every 30s --overlap skip
  delayq recurring next --cron '30 2 * * *' --tz America/New_York --from 2027-03-13T00:00:00Z
  delayq recurring get nightly-report
  delayq recurring pause nightly-report";

/// The subcommands of `delayq recurring`.
#[derive(Debug, clap::Subcommand)]
pub enum RecurringCommand {
    /// Create or update a schedule (upsert); prints {"name","queue","next_ms","result"}.
    Set(SetArgs),
    /// Every schedule with its next tick and counts.
    List,
    /// One schedule: spec, paused, next_ms, last_tick_ms, last_fired_ms, counts; exit 1 when unknown.
    Get(NameArg),
    /// Delete a schedule for good and cancel its pending tick.
    Delete(NameArg),
    /// Pause a schedule: no ticks until resumed.
    Pause(NameArg),
    /// Resume a schedule with its first tick after now.
    Resume(NameArg),
    /// Preview the next ticks of a cadence (no Redis): JSON lines {"tick_ms","local"}.
    Next(NextArgs),
}

/// A schedule's name.
#[derive(Debug, clap::Args)]
pub struct NameArg {
    /// The schedule's name (1..=128 of A-Z a-z 0-9 _ . : -).
    #[arg(value_name = "NAME", value_parser = schedule_name)]
    name: String,
}

/// The flags of `delayq recurring set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The schedule's name (1..=128 of A-Z a-z 0-9 _ . : -).
    #[arg(value_name = "NAME", value_parser = schedule_name)]
    name: String,
    /// The queue its ticks fire into.
    #[arg(long)]
    queue: String,
    /// A cron expression: 5 fields, or 6 with leading seconds, or @daily, @hourly, ...
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    cron: Option<String>,
    /// The IANA zone the cron fields are read in [default: UTC].
    #[arg(long, requires = "cron")]
    tz: Option<String>,
    /// A period of at least 1s (30s, 5m, 1h).
    #[arg(long)]
    every: Option<String>,
    /// The payload of every tick.
    #[arg(long)]
    payload: Option<String>,
    /// What to do with ticks missed while no node was alive: skip, once (default) or all.
    #[arg(long)]
    misfire: Option<String>,
    /// How late a tick may fire before it counts as missed [default: 1m].
    #[arg(long)]
    misfire_grace: Option<String>,
    /// With --misfire all, the most missed ticks fired [default: 100].
    #[arg(long)]
    max_catchup: Option<String>,
    /// allow (default), or skip a tick while the previous one is pending or running.
    #[arg(long)]
    overlap: Option<String>,
    /// Nothing fires before this (RFC 3339 or epoch ms); also the anchor of --every.
    #[arg(long)]
    start_at: Option<String>,
    /// Nothing fires at or after this (RFC 3339 or epoch ms).
    #[arg(long)]
    end_at: Option<String>,
}

/// The flags of `delayq recurring next`.
#[derive(Debug, clap::Args)]
pub struct NextArgs {
    /// A cron expression.
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    cron: Option<String>,
    /// The IANA zone of the cron fields [default: UTC].
    #[arg(long, requires = "cron")]
    tz: Option<String>,
    /// A period of at least 1s; its ticks are counted from --from.
    #[arg(long)]
    every: Option<String>,
    /// Ticks after this time (RFC 3339 or epoch ms) [default: now].
    #[arg(long)]
    from: Option<String>,
    /// How many ticks [default: 5].
    #[arg(long, default_value_t = 5)]
    count: usize,
}

fn schedule_name(text: &str) -> Result<String, String> {
    ScheduleName::new(text)
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

/// Runs a `delayq recurring` subcommand.
pub async fn run(command: RecurringCommand, json: bool, config: Config) -> CliResult<()> {
    match command {
        RecurringCommand::Next(args) => next(args),
        RecurringCommand::Set(args) => set(args, config).await,
        RecurringCommand::List => list(json, config).await,
        RecurringCommand::Get(name) => get(name, config).await,
        RecurringCommand::Delete(name) => delete(name, config).await,
        RecurringCommand::Pause(name) => pause_or_resume(name, true, config).await,
        RecurringCommand::Resume(name) => pause_or_resume(name, false, config).await,
    }
}

fn next(args: NextArgs) -> CliResult<()> {
    let raw = RawSpec {
        queue: Some("preview".to_owned()),
        cron: args.cron,
        tz: args.tz,
        every: args.every,
        ..RawSpec::default()
    };
    let spec = raw
        .validate()
        .map_err(|error| CliError::Usage(error.to_string()))?;
    let from_ms = match args.from {
        Some(text) => delayq_engine::recurring::spec::parse_time_ms("from", &text)
            .map_err(|error| CliError::Usage(error.to_string()))?,
        None => wall_clock_ms(),
    };
    let calendar =
        Calendar::new(&spec.cadence).map_err(|error| CliError::Usage(error.to_string()))?;
    // `every` has no stored anchor here: ticks are counted from --from.
    let anchor = match spec.cadence {
        Cadence::Every { every_ms } => from_ms.saturating_add(every_ms),
        Cadence::Cron { .. } => 0,
    };
    let mut out = String::new();
    for (tick_ms, local) in calendar.preview(from_ms, anchor, args.count) {
        // Written by hand so that the keys keep the documented order.
        let local = serde_json::Value::from(local);
        out.push_str(&format!("{{\"tick_ms\":{tick_ms},\"local\":{local}}}\n"));
    }
    write_stdout(&out)
}

fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

async fn set(args: SetArgs, config: Config) -> CliResult<()> {
    let raw = RawSpec {
        queue: Some(args.queue),
        cron: args.cron,
        tz: args.tz,
        every: args.every,
        payload: args.payload,
        misfire: args.misfire,
        misfire_grace: args.misfire_grace,
        max_catchup: args.max_catchup,
        overlap: args.overlap,
        start_at: args.start_at,
        end_at: args.end_at,
    };
    let spec = raw
        .validate()
        .map_err(|error| CliError::Usage(error.to_string()))?;
    let scheduler = producer(config).await?;
    let result = scheduler.set_recurring(&args.name, spec).await;
    close(scheduler).await;
    print_json(&delayq_http::json::recurring_set(&result?))
}

async fn list(json: bool, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler.list_recurring().await;
    close(scheduler).await;
    let schedules = result?;
    if json {
        let all: Vec<serde_json::Value> =
            schedules.iter().map(delayq_http::json::recurring).collect();
        return print_json(&all);
    }
    if schedules.is_empty() {
        return write_stdout("no recurring schedules\n");
    }
    let mut table = Table::new(&[
        ("NAME", false),
        ("QUEUE", false),
        ("CADENCE", false),
        ("NEXT", false),
        ("PAUSED", false),
        ("FIRED", true),
        ("SKIPPED", true),
        ("MISSED", true),
    ]);
    for schedule in &schedules {
        let next = schedule
            .next_ms
            .and_then(|ms| {
                schedule
                    .spec
                    .calendar()
                    .ok()
                    .map(|calendar| calendar.local_rfc3339(ms))
            })
            .unwrap_or_else(|| "-".to_owned());
        table.row(vec![
            schedule.name.clone(),
            schedule.spec.queue.as_str().to_owned(),
            schedule.spec.describe_cadence(),
            next,
            if schedule.paused { "yes" } else { "no" }.to_owned(),
            schedule.fired.to_string(),
            schedule.skipped.to_string(),
            schedule.missed.to_string(),
        ]);
    }
    write_stdout(&table.render())
}

async fn get(name: NameArg, config: Config) -> CliResult<()> {
    let scheduler = reader(config).await?;
    let result = scheduler.recurring(&name.name).await;
    close(scheduler).await;
    match result? {
        Some(schedule) => print_json(&delayq_http::json::recurring(&schedule)),
        None => Err(not_found(&name.name)),
    }
}

async fn delete(name: NameArg, config: Config) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = scheduler.delete_recurring(&name.name).await;
    close(scheduler).await;
    let deleted = result?;
    print_json(&json!({ "name": name.name, "deleted": deleted }))?;
    if deleted {
        Ok(())
    } else {
        Err(not_found(&name.name))
    }
}

async fn pause_or_resume(name: NameArg, pause: bool, config: Config) -> CliResult<()> {
    let scheduler = producer(config).await?;
    let result = if pause {
        scheduler.pause_recurring(&name.name).await
    } else {
        scheduler.resume_recurring(&name.name).await
    };
    close(scheduler).await;
    match result? {
        Some(schedule) => print_json(&delayq_http::json::recurring(&schedule)),
        None => Err(not_found(&name.name)),
    }
}

fn not_found(name: &str) -> CliError {
    CliError::Runtime(format!("recurring schedule {name:?} not found"))
}
