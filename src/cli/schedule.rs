//! `delayq schedule`: one task from flags, or many from JSON lines (`--from`).

use std::path::PathBuf;
use std::time::Duration;

use delayq_engine::config::Config;
use delayq_engine::{ScheduleMode, ScheduleRequest, Scheduled, TraceParent, When};

use super::error::CliResult;
use super::output::print_json;
use super::{close, load, producer, values};

/// Examples shown by `delayq schedule --help`.
pub const SCHEDULE_EXAMPLES: &str = "\
Examples:
  delayq schedule order-timeout order-42 --in 30m --payload '{\"order\":42}' --mode if_absent
  delayq schedule device-offline dev-7 --in 90s              # each heartbeat moves it (replace)
  delayq schedule reminders r-7 --at 2030-01-01T09:00:00+02:00
  delayq schedule reminders r-8 --at 1893488400000
  delayq schedule orders o-9 --in 1h --traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
      the fire's span (exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set on the
      nodes) links to this trace context
  printf '{\"id\":\"a\",\"delay_ms\":500}\\n{\"id\":\"b\",\"due_ms\":1893488400000,\"payload\":\"x\",\"mode\":\"earlier\"}\\n' \\
    | delayq schedule order-timeout --from -

One task prints {\"queue\",\"id\",\"due_ms\",\"replaced\",\"duplicate\",\"kept\"}: `replaced` when a
live task with this id was replaced, `duplicate` when the same id and due already fired within
engine.executed_retention (nothing was scheduled), `kept` when the mode kept the live task that
was there (`due_ms` is then its due).

--mode says what happens when the id has a live (pending) task:
  replace    (default) the new schedule replaces it: each schedule moves the deadline (debounce)
  if_absent  the live task stays: the first schedule wins (throttle)
  earlier    the earlier of the two dues wins, with its payload
  later      the later of the two dues wins, with its payload
An id with no live task is scheduled in every mode. A task whose handler is running is kept
by if_absent and earlier; later arms a later due beside it (as replace does). A dead letter is
replaced by every mode but if_absent.

--at takes RFC 3339 with any offset (without one it is UTC) or epoch milliseconds; a number
below 10^11 is refused, as it looks like seconds.

--from reads one JSON object per line: {\"id\":..,\"delay_ms\":..} or {\"id\":..,\"due_ms\":..},
with an optional \"payload\" string, \"mode\" (as --mode; --mode is the default for lines
without one) and \"traceparent\" (as --traceparent, which is the default for lines without
one; a line with an invalid one is refused). Empty lines are skipped. A bad line is reported on stderr with its line number
and skipped; the others still load. The summary
{\"scheduled\",\"replaced\",\"duplicates\",\"kept\",\"failed\"} goes to stdout. The exit status is
0 when every line was scheduled (or kept, or a duplicate), 1 when some lines failed (the rest
were loaded) or the load stopped on an error, 2 when the file cannot be read.";

/// The arguments of `delayq schedule`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("when").required(true).args(["in_", "at", "from"]))]
pub struct ScheduleArgs {
    /// The queue.
    #[arg(value_name = "QUEUE", value_parser = values::queue_name)]
    queue: String,

    /// The task's id (what scheduling an existing id does is up to --mode).
    #[arg(value_name = "ID", value_parser = values::task_id, required_unless_present = "from")]
    id: Option<String>,

    /// Due this long from now on the cluster clock (500ms, 30s, 1h 30m).
    #[arg(long = "in", id = "in_", value_name = "DURATION", value_parser = values::duration)]
    in_: Option<Duration>,

    /// Due at this time: RFC 3339 with any offset (2030-01-01T09:00:00+02:00), or
    /// milliseconds since the Unix epoch (not seconds: below 10^11 is refused).
    #[arg(long, value_name = "EPOCH_MS|RFC3339", value_parser = values::at_time)]
    at: Option<u64>,

    /// The task's payload (text).
    #[arg(long, value_name = "TEXT", conflicts_with = "from")]
    payload: Option<String>,

    /// What to do when the id has a live task: replace (default), if_absent, earlier, later.
    #[arg(long, value_name = "MODE", default_value = "replace", value_parser = values::schedule_mode)]
    mode: ScheduleMode,

    /// Load many tasks from JSON lines in FILE (`-` for stdin) instead.
    #[arg(long, value_name = "FILE|-", conflicts_with = "id")]
    from: Option<PathBuf>,

    /// The W3C trace context (00-<trace id>-<span id>-<flags>) the fire's span links to; with
    /// --from, that of the lines that give no "traceparent".
    #[arg(long, value_name = "TRACEPARENT", value_parser = values::traceparent)]
    traceparent: Option<TraceParent>,
}

/// Schedules one task, or loads a file.
pub async fn run(args: ScheduleArgs, config: Config) -> CliResult<()> {
    if let Some(source) = args.from {
        let defaults = load::LineDefaults {
            mode: args.mode,
            traceparent: args.traceparent,
        };
        return load::run(&args.queue, &source, defaults, config).await;
    }
    let when = match (args.in_, args.at) {
        (Some(delay), _) => When::In(delay),
        (None, Some(due_ms)) => When::At(due_ms),
        // clap's group requires one of --in, --at, --from.
        (None, None) => When::In(Duration::ZERO),
    };
    let id = args.id.unwrap_or_default();
    let payload = args.payload.unwrap_or_default();
    let scheduler = producer(config).await?;
    let request = ScheduleRequest::new(id, when, payload.into_bytes())
        .with_mode(args.mode)
        .with_traceparent(args.traceparent);
    let result = scheduler.schedule_request(&args.queue, request).await;
    close(scheduler).await;
    let scheduled: Scheduled = result?;
    print_json(&scheduled)
}
