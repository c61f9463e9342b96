//! The `delayq` command line: argument parsing, dispatch to one module per command, and the
//! mapping of failures to exit codes (2 for usage errors, 1 for runtime errors).

pub mod bench;
mod dead;
pub mod demo;
mod error;
mod handlers;
mod harness;
mod inspect;
mod keys;
mod load;
mod migrate;
mod node;
mod output;
mod queue;
mod recurring;
mod schedule;
mod serve;
mod stats;
pub mod telemetry;
mod values;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use delayq_engine::config::Config;
use delayq_engine::Scheduler;

pub use error::{clap_error_line, CliError, CliResult};

const EXAMPLES: &str = "\
Examples:
  delayq demo                                   # in-process cluster, no Redis needed
  delayq node                                   # run a node; one JSON line per fired task
  delayq node --handler exec -- ./on-timeout.sh # run a script per task
  delayq schedule order-timeout order-42 --in 30m --payload '{\"order\":42}'
  delayq schedule reminders r-7 --at 2030-01-01T09:00:00Z
  delayq schedule order-timeout --from tasks.jsonl
  delayq get order-timeout order-42
  delayq cancel order-timeout order-42
  delayq stats --watch
  delayq nodes --json
  delayq pending order-timeout --limit 10       # the next tasks by due time
  delayq dead order-timeout                     # dead letters with their last error
  delayq keys webhooks                          # flow keys holding tasks back
  delayq retry order-timeout --all              # schedule the dead letters again, now
  delayq serve                                  # HTTP API, dashboard, /metrics on 127.0.0.1:7070
  delayq queue pause order-timeout              # no fires until `delayq queue resume`
  delayq recurring set nightly --queue reports --cron '0 9 * * *' --tz Europe/Berlin
  delayq migrate --check                        # PostgreSQL: exit 1 while migrations are pending

Configuration: --config FILE, else ./cluster.yaml if it exists, else the built-in defaults.
DELAYQ_BACKEND (redis|postgres), DELAYQ_REDIS_URL, DELAYQ_POSTGRES_URL, DELAYQ_KEY_PREFIX,
DELAYQ_NODE_NAME, DELAYQ_HTTP_LISTEN and DELAYQ_HTTP_TOKEN override the file.
Logs go to stderr (RUST_LOG sets the filter); data goes to stdout.
Exit codes: 0 success, 1 runtime error (Redis unreachable, task not found, ...),
2 usage error (bad flag, value or configuration).";

/// `delayq`: a clustered, sharded delayed-task scheduler backed by Redis.
#[derive(Debug, Parser)]
#[command(name = "delayq", version, about, long_about = None, after_help = EXAMPLES)]
pub struct Cli {
    /// Configuration file [default: ./cluster.yaml when it exists, else built-in defaults].
    #[arg(long, global = true, value_name = "FILE", env = "DELAYQ_CONFIG")]
    pub config: Option<PathBuf>,

    /// Print data as JSON (commands that print one object always print JSON).
    #[arg(long, global = true)]
    pub json: bool,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands of `delayq`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one cluster node until SIGINT/SIGTERM, then shut down gracefully.
    #[command(after_help = node::NODE_EXAMPLES)]
    Node(node::NodeArgs),
    /// Schedule one task (or replace it), or load many from JSON lines with --from.
    #[command(after_help = schedule::SCHEDULE_EXAMPLES)]
    Schedule(schedule::ScheduleArgs),
    /// Cancel a task; prints {"cancelled":true|false}.
    Cancel(inspect::TaskRef),
    /// Show a task (pending, inflight, dead or done); exits 1 when it is not found.
    Get(inspect::TaskRef),
    /// Per-queue counts: pending, due now, in flight, dead, done (retained), held back.
    Stats(stats::StatsArgs),
    /// The live nodes of the cluster and how many partitions each owns.
    Nodes,
    /// The next pending tasks of a queue by due time.
    Pending(dead::ListArgs),
    /// The dead letters of a queue with their last error and attempts.
    Dead(dead::ListArgs),
    /// On a queue with flow keys, the keys holding tasks back, with their running and waiting counts.
    Keys(keys::KeysArgs),
    /// Schedule dead letters again, due now with attempt 1; prints {"retried":N}.
    Retry(dead::DeadRef),
    /// Delete dead letters; prints {"purged":N}.
    Purge(dead::DeadRef),
    /// The HTTP API, dashboard and /metrics, without joining the cluster.
    #[command(after_help = serve::SERVE_EXAMPLES)]
    Serve(serve::ServeArgs),
    /// Queue controls: pause and resume a queue cluster-wide.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// Recurring schedules: set, list, get, delete, pause, resume, and a preview of ticks.
    #[command(subcommand, after_help = recurring::RECURRING_EXAMPLES)]
    Recurring(recurring::RecurringCommand),
    /// An in-process cluster (in memory, or --redis/--postgres): tasks fire, a node dies, its work is taken over.
    Demo(demo::DemoArgs),
    /// The load and precision benchmark.
    Bench(bench::BenchArgs),
    /// Apply delayq's schema migrations to the configured PostgreSQL (--check: only report).
    #[command(after_help = migrate::MIGRATE_EXAMPLES)]
    Migrate(migrate::MigrateArgs),
}

impl Cli {
    /// Whether this invocation runs a long-lived node (its logs default to `info`; the
    /// one-shot commands default to `warn` so that their output stays readable).
    pub fn runs_node(&self) -> bool {
        matches!(self.command, Command::Node(_) | Command::Serve(_))
    }
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> CliResult<()> {
    let Cli {
        config,
        json,
        command,
    } = cli;
    match command {
        Command::Node(args) => node::run(args, load_config(config.as_deref())?).await,
        Command::Schedule(args) => schedule::run(args, load_config(config.as_deref())?).await,
        Command::Cancel(task) => inspect::cancel(task, load_config(config.as_deref())?).await,
        Command::Get(task) => inspect::get(task, load_config(config.as_deref())?).await,
        Command::Stats(args) => stats::run(args, json, load_config(config.as_deref())?).await,
        Command::Nodes => inspect::nodes(json, load_config(config.as_deref())?).await,
        Command::Pending(args) => dead::pending(args, json, load_config(config.as_deref())?).await,
        Command::Dead(args) => dead::dead(args, json, load_config(config.as_deref())?).await,
        Command::Keys(args) => keys::run(args, json, load_config(config.as_deref())?).await,
        Command::Retry(args) => dead::retry(args, load_config(config.as_deref())?).await,
        Command::Purge(args) => dead::purge(args, load_config(config.as_deref())?).await,
        Command::Serve(args) => serve::run(args, load_config(config.as_deref())?).await,
        Command::Queue(command) => queue::run(command, load_config(config.as_deref())?).await,
        Command::Recurring(command) => match command {
            // The preview needs neither Redis nor a configuration.
            recurring::RecurringCommand::Next(_) => {
                recurring::run(command, json, Config::default()).await
            }
            command => recurring::run(command, json, load_config(config.as_deref())?).await,
        },
        Command::Demo(args) => demo::run(args, json, config)
            .await
            .map_err(CliError::from_boxed),
        Command::Bench(args) => bench::run(args, json, config)
            .await
            .map_err(CliError::from_boxed),
        Command::Migrate(args) => migrate::run(args, json, load_config(config.as_deref())?).await,
    }
}

/// Loads the configuration: the explicit file (which must be readable), else
/// `./cluster.yaml` when it exists, else the defaults. Any problem is a usage error.
fn load_config(path: Option<&Path>) -> CliResult<Config> {
    Config::load_or_default(path).map_err(|error| CliError::Usage(error.to_string()))
}

/// A scheduler without handlers (producer and observer mode): it never joins the cluster,
/// but reads the cluster clock, so `--in` is relative to cluster time.
async fn producer(config: Config) -> CliResult<Scheduler> {
    Ok(Scheduler::builder(config).start().await?)
}

/// A scheduler for a command that only reads: like [`producer`], but on PostgreSQL it
/// never creates or migrates the schema, and a database without it is an error saying so.
async fn reader(config: Config) -> CliResult<Scheduler> {
    Ok(Scheduler::builder(config)
        .migrate_schema(false)
        .start()
        .await?)
}

/// Leaves a producer quietly (it holds no partitions; a failure here changes nothing).
async fn close(scheduler: Scheduler) {
    if let Err(error) = scheduler.shutdown().await {
        tracing::debug!(%error, "closing the producer failed");
    }
}
