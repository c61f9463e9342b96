//! `delayq node`: one cluster member running a handler until SIGINT/SIGTERM.

use std::sync::Arc;

use clap::ValueEnum;
use delayq_engine::config::Config;
use delayq_engine::Scheduler;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::error::{CliError, CliResult};
use super::handlers::{
    ExecHandler, HttpHandler, LogHandler, NodeHandler, WebhookSigner, SECRETS_VARIABLE,
};
use super::serve::HttpServer;
use super::values;

/// Examples shown by `delayq node --help`.
pub const NODE_EXAMPLES: &str = "\
Examples:
  delayq node
      prints {\"queue\",\"id\",\"due_ms\",\"fired_ms\",\"attempt\",\"node\"} per fired task
  delayq node --queue order-timeout --queue reminders
  delayq node --handler exec -- ./cancel-order.sh --verbose
      the script gets DELAYQ_QUEUE, DELAYQ_ID, DELAYQ_DUE_MS, DELAYQ_ATTEMPT (and
      DELAYQ_GENERATION, DELAYQ_FIRED_MS, DELAYQ_NODE) in its environment and the payload on
      stdin; exit status 0 acks the task, anything else fails the attempt
  delayq node --handler http --url http://localhost:8080/tasks
      POSTs {\"queue\",\"id\",\"due_ms\",\"fired_ms\",\"attempt\",\"generation\",\"node\",\"payload\"}
      (payload_base64 when the payload is not UTF-8); a 2xx status acks; a 429 or 503 with
      Retry-After is retried then (at most the queue's backoff.max later)
  DELAYQ_WEBHOOK_SECRETS=whsec_... delayq node --handler http --url https://hooks.example/delayq
      signs each request as Standard Webhooks says (webhook-id, webhook-timestamp,
      webhook-signature); several secrets (spaces or commas) while rotating, or
      --secrets-file F with one a line

A failed attempt is retried with backoff up to the queue's max_attempts, then dead-lettered
(see it with `delayq get QUEUE ID`). SIGINT or SIGTERM drains running tasks for up to
engine.shutdown_grace, leaves the cluster and exits 0; a second signal exits at once (130).";

/// What `delayq node` does with each fired task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HandlerKind {
    /// Print one JSON line per fired task on stdout.
    Log,
    /// Run the command given after `--` per task.
    Exec,
    /// POST each task as JSON to --url.
    Http,
}

/// The arguments of `delayq node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// What to do with each fired task.
    #[arg(long, value_enum, default_value_t = HandlerKind::Log)]
    handler: HandlerKind,

    /// Serve only this queue (repeatable) [default: every queue, including queues that
    /// producers create later].
    #[arg(long = "queue", value_name = "NAME", value_parser = values::queue_name)]
    queues: Vec<String>,

    /// Where `--handler http` posts the tasks.
    #[arg(long, value_name = "URL", required_if_eq("handler", "http"))]
    url: Option<String>,

    /// The secrets `--handler http` signs with, one `whsec_<base64>` a line (several while
    /// rotating) [default: DELAYQ_WEBHOOK_SECRETS, separated by spaces or commas; unsigned
    /// when neither is set].
    #[arg(long, value_name = "FILE")]
    secrets_file: Option<std::path::PathBuf>,

    /// Also serve the HTTP API, dashboard and /metrics on this address [default:
    /// http.listen; none when unset].
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,

    /// The command `--handler exec` runs per task, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs the node until a signal, then shuts it down gracefully.
pub async fn run(args: NodeArgs, config: Config) -> CliResult<()> {
    let handler = build_handler(&args)?;
    let listen = match args.listen {
        Some(addr) => Some(addr),
        None => super::serve::listen_from_config(&config)?,
    };
    let mut signals = Signals::new()?;
    let mut builder = Scheduler::builder(config);
    if args.queues.is_empty() {
        builder = builder.default_handler(handler);
    } else {
        for queue in &args.queues {
            builder = builder.handler(queue, handler.clone());
        }
    }
    let scheduler = tokio::select! {
        started = builder.start() => started?,
        name = signals.next() => return Err(interrupted(name, "while starting")),
    };
    let http = match listen {
        Some(addr) => match HttpServer::start(&scheduler, addr).await {
            Ok(server) => Some(server),
            Err(error) => {
                scheduler.shutdown().await?;
                return Err(error);
            }
        },
        None => None,
    };
    let queues = if args.queues.is_empty() {
        "*".to_owned()
    } else {
        args.queues.join(",")
    };
    tracing::info!(node = %scheduler.node_id(), %queues, handler = ?args.handler, "delayq node running; SIGINT or SIGTERM stops it");
    notify_systemd(sd_notify::NotifyState::Ready);

    let name = signals.next().await;
    notify_systemd(sd_notify::NotifyState::Stopping);
    tracing::info!(signal = name, node = %scheduler.node_id(), "shutting down: draining running tasks, then leaving the cluster");
    tokio::select! {
        stopped = scheduler.shutdown() => stopped?,
        // Returning drops the runtime with the running handlers: `exec` commands are killed.
        name = signals.next() => return Err(interrupted(name, "during the graceful shutdown")),
    }
    if let Some(http) = http {
        http.stop().await;
    }
    tracing::info!(node = %scheduler.node_id(), "node stopped");
    Ok(())
}

/// Tells systemd the node's state when it runs under a `Type=notify` unit (`$NOTIFY_SOCKET`
/// set; nothing happens otherwise): `READY=1` once it has joined the cluster and serves its
/// HTTP address, `STOPPING=1` when a signal starts the drain. A failure to tell is logged and
/// changes nothing else: systemd then waits for its own start timeout.
fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    // sd_notify::notify itself does nothing when NOTIFY_SOCKET is unset.
    if let Err(error) = sd_notify::notify(&[state]) {
        tracing::warn!(%error, "could not notify systemd through NOTIFY_SOCKET");
    }
}

/// The handler the flags ask for; a missing or extra flag is a usage error.
fn build_handler(args: &NodeArgs) -> CliResult<NodeHandler> {
    if args.url.is_some() && args.handler != HandlerKind::Http {
        return Err(CliError::Usage(
            "--url is only for --handler http".to_owned(),
        ));
    }
    if args.secrets_file.is_some() && args.handler != HandlerKind::Http {
        return Err(CliError::Usage(
            "--secrets-file is only for --handler http".to_owned(),
        ));
    }
    if !args.command.is_empty() && args.handler != HandlerKind::Exec {
        return Err(CliError::Usage(format!(
            "a command after `--` ({:?}) is only for --handler exec",
            args.command.join(" ")
        )));
    }
    Ok(match args.handler {
        HandlerKind::Log => NodeHandler::Log(Arc::new(LogHandler::new())),
        HandlerKind::Exec => NodeHandler::Exec(Arc::new(
            ExecHandler::new(&args.command).map_err(CliError::Usage)?,
        )),
        HandlerKind::Http => {
            let url = args.url.as_deref().unwrap_or_default();
            let signer = webhook_signer(args)?;
            NodeHandler::Http(Arc::new(
                HttpHandler::new(url, signer).map_err(CliError::Usage)?,
            ))
        }
    })
}

/// The signer of `--handler http`, from `--secrets-file` or DELAYQ_WEBHOOK_SECRETS; `None`
/// (unsigned requests, warned about once here) when neither is set.
fn webhook_signer(args: &NodeArgs) -> CliResult<Option<WebhookSigner>> {
    let variable = match std::env::var(SECRETS_VARIABLE) {
        Ok(value) => Some(value),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(CliError::Usage(format!(
                "{SECRETS_VARIABLE} is not valid UTF-8"
            )))
        }
    };
    let signer = WebhookSigner::configured(args.secrets_file.as_deref(), variable.as_deref())
        .map_err(|error| CliError::Usage(error.to_string()))?;
    match &signer {
        Some(signer) => tracing::info!(
            secrets = signer.secrets(),
            "--handler http signs each request (Standard Webhooks)"
        ),
        None => tracing::warn!(
            "--handler http sends unsigned requests: a receiver cannot tell them from anyone \
             else's; set {SECRETS_VARIABLE} or --secrets-file to sign them"
        ),
    }
    Ok(signer)
}

/// The error that ends the node at once after a signal (exit status 130).
fn interrupted(signal: &str, when: &str) -> CliError {
    CliError::Interrupted(format!("{signal} {when}: exiting at once"))
}

/// SIGINT and SIGTERM, listened to from the start (so that neither kills the process
/// with its default action while the node starts or drains).
pub(super) struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    pub(super) fn new() -> CliResult<Self> {
        let listen = |kind: SignalKind| {
            signal(kind)
                .map_err(|error| CliError::Runtime(format!("cannot listen for signals: {error}")))
        };
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM and names it.
    pub(super) async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}
