//! [`RedisConnection`]: connecting to any topology, and sending commands and pipelines.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo, Pipeline,
    RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};
use tokio::time::Instant;

use crate::error::{refused_before_running, reply_error_kind, Error, Result};
use crate::pubsub::{Source, Subscriber};
use crate::sentinel::{SentinelMaster, SentinelSetup};
use crate::topology::{ConnectOptions, Topology, TopologyKind};

/// Pause between two sends of a command the server refused to run (e.g. `LOADING`).
const REFUSED_PAUSE: Duration = Duration::from_millis(100);

/// One connection to Redis, whatever its topology: cheap to clone, safe to share, and
/// self-repairing.
///
/// - **Standalone**: a redis-rs `ConnectionManager` (reconnects in the background).
/// - **Cluster**: a redis-rs cluster connection: every command goes to the master of its first
///   key's slot (`EVALSHA`/`EVAL`/`FCALL`: of `KEYS[1]`), `MOVED`/`ASK` are followed, and the
///   slot map is read again after a failover.
/// - **Sentinel**: a connection to the master the sentinels name, moved on any sign of a
///   failover (see the `sentinel` module).
///
/// It implements [`redis::aio::ConnectionLike`], so redis-rs commands, pipelines and
/// [`redis::Script`] work on it unchanged; the methods below add typed errors without
/// passwords, scripts routed and reloaded by slot, `WAIT`, and pub/sub.
#[derive(Clone)]
pub struct RedisConnection {
    pub(crate) backend: Backend,
    pub(crate) shared: Arc<Shared>,
}

#[derive(Clone)]
pub(crate) enum Backend {
    Standalone {
        manager: ConnectionManager,
        /// Shared: a store clones its connections for every call it hands to a batch.
        client: Arc<Client>,
    },
    Cluster(ClusterConnection),
    Sentinel(SentinelMaster),
}

pub(crate) struct Shared {
    pub(crate) options: ConnectOptions,
    /// Whether library scripts are called with `FCALL` (see `calls.rs`).
    pub(crate) functions: AtomicBool,
    pub(crate) shown: String,
    pub(crate) secrets: Vec<String>,
    tls: Option<TlsCertificates>,
    db: i64,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("topology", &self.shared.shown)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// Connects to the topology of `options`, retrying with backoff until
    /// [`crate::Timeouts::start`] runs out (one `warn` line per failed attempt).
    ///
    /// Fails at once on a refused login ([`Error::Authentication`]), a malformed URL or
    /// unreadable TLS files, and with [`Error::Unreachable`] when the time runs out. No
    /// message contains a password.
    pub async fn connect(options: ConnectOptions) -> Result<Self> {
        validate(&options.topology)?;
        if options
            .topology
            .urls()
            .iter()
            .any(|url| url.starts_with("rediss://"))
        {
            crate::tls::ensure_crypto_provider();
        }
        let tls = crate::tls::load(options.tls.as_ref(), &options.topology)?;
        let shown = options.topology.describe();
        let secrets = options.topology.secrets();
        let db = match &options.topology {
            Topology::Cluster { .. } => 0,
            topology => topology
                .urls()
                .first()
                .and_then(|url| url.as_str().into_connection_info().ok())
                .map_or(0, |info| info.redis_settings().db()),
        };
        let shared = Arc::new(Shared {
            functions: AtomicBool::new(options.functions),
            shown,
            secrets,
            tls,
            db,
            options,
        });
        let timeouts = shared.options.timeouts;
        let started = Instant::now();
        let mut pause = Duration::from_millis(100);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let remaining = timeouts.start.saturating_sub(started.elapsed());
            let limit = remaining.min(timeouts.connect * 2 + timeouts.response);
            let failure = match tokio::time::timeout(limit, connect_backend(&shared)).await {
                Ok(Ok(backend)) => {
                    tracing::debug!(topology = %shared.shown, attempt, "connected to Redis");
                    return Ok(RedisConnection { backend, shared });
                }
                Ok(Err(error)) if !crate::is_transient(&error) => {
                    return Err(permanent_connect_error(&shared, &error));
                }
                Ok(Err(error)) => crate::redact::scrub(&error.to_string(), &shared.secrets),
                Err(_) => format!("no answer within {limit:?}"),
            };
            let remaining = timeouts.start.saturating_sub(started.elapsed());
            tracing::warn!(
                topology = %shared.shown,
                attempt,
                remaining_ms = remaining.as_millis() as u64,
                error = %failure,
                "Redis unreachable; retrying"
            );
            if remaining.is_zero() {
                return Err(Error::Unreachable {
                    target: shared.shown.clone(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    message: failure,
                });
            }
            tokio::time::sleep(pause.min(remaining)).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// The shape of the deployment.
    pub fn kind(&self) -> TopologyKind {
        self.shared.options.topology.kind()
    }

    /// The topology for logs and errors, without passwords.
    pub fn describe(&self) -> &str {
        &self.shared.shown
    }

    /// On Sentinel, the address (`host:port`) of the master in use (none between a lost
    /// master and the next command); `None` on the other topologies.
    pub fn master_address(&self) -> Option<String> {
        match &self.backend {
            Backend::Sentinel(master) => master.address(),
            _ => None,
        }
    }

    /// The typed error of `error` met during `operation`, scrubbed of passwords: for callers
    /// that use the [`redis::aio::ConnectionLike`] side of this connection.
    pub fn error(&self, operation: &'static str, error: &RedisError) -> Error {
        Error::from_redis(operation, error, &self.shared.secrets)
    }

    /// Sends `command` and converts its reply (a server error reply is an error).
    pub async fn query<T: FromRedisValue>(
        &self,
        operation: &'static str,
        command: &Cmd,
    ) -> Result<T> {
        let reply = self.send(command).await;
        self.convert(operation, reply)
    }

    /// Sends `pipeline` (on a cluster, all its keys must share one slot) and converts the
    /// replies.
    pub async fn query_pipeline<T: FromRedisValue>(
        &self,
        operation: &'static str,
        pipeline: &Pipeline,
    ) -> Result<T> {
        let mut connection = self.clone();
        pipeline
            .query_async(&mut connection)
            .await
            .map_err(|error| self.error(operation, &error))
    }

    /// Sends `command` to the master serving `key`'s slot on a cluster (e.g. `TIME` of the
    /// `{cluster}` slot), to the one master otherwise.
    pub async fn query_at_slot_of<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        command: &Cmd,
    ) -> Result<T> {
        let reply = self.send_at_slot(Slot::for_key(key), command).await;
        self.convert(operation, reply)
    }

    /// Publishes `payload` on `channel`: `SPUBLISH` on a cluster (delivered by the master of
    /// the channel's slot to [`Subscriber`]s), `PUBLISH` otherwise. Returns how many
    /// subscribers received it.
    pub async fn publish(&self, channel: &str, payload: &[u8]) -> Result<u64> {
        let name = match self.kind() {
            TopologyKind::Cluster => "SPUBLISH",
            _ => "PUBLISH",
        };
        let mut command = redis::cmd(name);
        command.arg(channel).arg(payload);
        self.query("publish", &command).await
    }

    /// A subscriber on its own connection: sharded pub/sub on a cluster, plain pub/sub on the
    /// (current) master otherwise. See [`Subscriber`].
    pub async fn subscriber(&self) -> Result<Subscriber> {
        let source = match &self.backend {
            Backend::Standalone { client, .. } => Source::Server(Box::new(Client::clone(client))),
            Backend::Sentinel(master) => Source::Sentinel(master.clone()),
            Backend::Cluster(_) => {
                let (pushes_tx, pushes) = tokio::sync::mpsc::unbounded_channel();
                let client = cluster_builder(&self.shared)
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(pushes_tx)
                    .build()
                    .map_err(|error| self.error("subscribe", &error))?;
                Source::Cluster {
                    client: Box::new(client),
                    pushes,
                }
            }
        };
        Subscriber::start(source)
            .await
            .map_err(|error| self.error("subscribe", &error))
    }

    /// Sends one command; commands the server refused before running them (`LOADING`,
    /// `READONLY`, ...) are sent again until [`crate::Timeouts::failover`] runs out.
    pub(crate) async fn send(&self, command: &Cmd) -> RedisResult<Value> {
        match &self.backend {
            Backend::Standalone { manager, .. } => {
                let deadline = Instant::now() + self.shared.options.timeouts.failover;
                loop {
                    let reply = manager.clone().req_packed_command(command).await?;
                    if !refused_before_running(reply_error_kind(&reply))
                        || Instant::now() >= deadline
                    {
                        return Ok(reply);
                    }
                    tokio::time::sleep(REFUSED_PAUSE).await;
                }
            }
            Backend::Cluster(cluster) => cluster.clone().req_packed_command(command).await,
            Backend::Sentinel(master) => master.request(command).await,
        }
    }

    /// Sends `command` to the master of `slot` (cluster) or the one master.
    pub(crate) async fn send_at_slot(&self, slot: Slot, command: &Cmd) -> RedisResult<Value> {
        match &self.backend {
            Backend::Cluster(cluster) => {
                let route = Route::with_slot(slot, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                cluster
                    .clone()
                    .route_command(command.clone(), routing)
                    .await
            }
            _ => self.send(command).await,
        }
    }

    fn convert<T: FromRedisValue>(
        &self,
        operation: &'static str,
        reply: RedisResult<Value>,
    ) -> Result<T> {
        reply
            .and_then(|value| value.extract_error())
            .and_then(|value| redis::from_redis_value(value).map_err(RedisError::from))
            .map_err(|error| self.error(operation, &error))
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.send(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match &mut self.backend {
                Backend::Standalone { manager, .. } => {
                    manager.req_packed_commands(pipeline, offset, count).await
                }
                Backend::Cluster(cluster) => {
                    cluster.req_packed_commands(pipeline, offset, count).await
                }
                Backend::Sentinel(master) => master.request_pipeline(pipeline, offset, count).await,
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.backend {
            Backend::Sentinel(master) => master.db(),
            _ => self.shared.db,
        }
    }
}

/// The settings every URL of the topology must pass before any attempt.
fn validate(topology: &Topology) -> Result<()> {
    let field = match topology {
        Topology::Standalone { .. } => "redis.url",
        Topology::Cluster { .. } => "redis.cluster",
        Topology::Sentinel { .. } => "redis.sentinel.urls",
    };
    if topology.urls().is_empty() {
        return Err(Error::InvalidConfig {
            field,
            value: "[]".to_owned(),
            reason: "at least one URL is needed".to_owned(),
        });
    }
    if let Topology::Sentinel { master, .. } = topology {
        if master.trim().is_empty() {
            return Err(Error::InvalidConfig {
                field: "redis.sentinel.master",
                value: String::new(),
                reason: "the master's name is needed".to_owned(),
            });
        }
    }
    for url in topology.urls() {
        if let Err(error) = url.as_str().into_connection_info() {
            return Err(Error::InvalidConfig {
                field,
                value: crate::redact_url(url),
                reason: crate::redact::scrub(&error.to_string(), &topology.secrets()),
            });
        }
    }
    Ok(())
}

fn permanent_connect_error(shared: &Shared, error: &RedisError) -> Error {
    let message = crate::redact::scrub(&error.to_string(), &shared.secrets);
    let login_refused = error.kind() == ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"));
    if login_refused {
        Error::Authentication {
            target: shared.shown.clone(),
            message,
        }
    } else {
        Error::Command {
            operation: "connect",
            transient: false,
            code: error.code().map(str::to_owned),
            message: format!("{}: {message}", shared.shown),
        }
    }
}

/// One attempt to connect to the topology and see it answer.
async fn connect_backend(shared: &Shared) -> RedisResult<Backend> {
    let timeouts = shared.options.timeouts;
    match &shared.options.topology {
        Topology::Standalone { url } => {
            let client = match &shared.tls {
                Some(certificates) => Client::build_with_tls(url.as_str(), certificates.clone())?,
                None => Client::open(url.as_str())?,
            };
            let probe_config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeouts.connect))
                .set_response_timeout(Some(timeouts.response));
            let mut probe = client
                .get_multiplexed_async_connection_with_config(&probe_config)
                .await?;
            redis::cmd("PING").query_async::<Value>(&mut probe).await?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeouts.connect))
                .set_response_timeout(Some(timeouts.response))
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(1))
                .set_number_of_retries(3);
            let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
            Ok(Backend::Standalone {
                manager,
                client: Arc::new(client),
            })
        }
        Topology::Cluster { .. } => {
            let client: ClusterClient = cluster_builder(shared).build()?;
            let mut connection = client.get_async_connection().await?;
            redis::cmd("PING")
                .query_async::<Value>(&mut connection)
                .await?;
            Ok(Backend::Cluster(connection))
        }
        Topology::Sentinel {
            urls,
            master,
            sentinel_credentials,
        } => {
            let setup = SentinelSetup {
                urls,
                master_name: master,
                sentinel_credentials: sentinel_credentials.as_ref(),
                tls: shared.tls.as_ref(),
                timeouts,
            };
            Ok(Backend::Sentinel(SentinelMaster::connect(setup).await?))
        }
    }
}

/// A cluster client builder for the seeds, TLS files and timeouts of `shared`.
fn cluster_builder(shared: &Shared) -> ClusterClientBuilder {
    let timeouts = shared.options.timeouts;
    let mut builder = ClusterClientBuilder::new(
        shared
            .options
            .topology
            .urls()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .connection_timeout(timeouts.connect)
    .response_timeout(timeouts.response)
    .overall_response_timeout(Some(timeouts.failover));
    if let Some(certificates) = &shared.tls {
        builder = builder.certs(certificates.clone());
    }
    builder
}
