//! The `delayq` command line: run cluster nodes, schedule and inspect tasks, run the demo
//! and the benchmark. See `delayq --help`.

#![warn(missing_docs)]

mod cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cli::{clap_error_line, Cli};

/// jemalloc instead of the system's malloc: a node allocates and frees small buffers for
/// every task it fires, and glibc's malloc spent about a third of the node's CPU on them.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            // --help and --version: print them and exit 0.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error)
            if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            // `delayq` alone: the help, on stderr, as a usage error.
            let _ = error.print();
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("{}", clap_error_line(&error));
            return ExitCode::from(2);
        }
    };
    quiet_panics();
    let runs_node = cli.runs_node();
    let telemetry = cli::telemetry::init(if runs_node { "info" } else { "warn" }, runs_node);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(cli::run(cli));
    // Do not wait for a blocking read of stdin that may still be parked.
    runtime.shutdown_timeout(Duration::from_millis(200));
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error.one_line());
            ExitCode::from(error.exit_code())
        }
    }
}

/// A panic (a bug) prints one line naming where it happened, not a backtrace.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".to_owned());
        let location = info
            .location()
            .map(|location| format!(" at {}:{}", location.file(), location.line()))
            .unwrap_or_default();
        eprintln!("error: internal error (a bug in delayq): {message}{location}");
    }));
}
