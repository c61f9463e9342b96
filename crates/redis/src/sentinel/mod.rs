//! A connection to the master that Redis Sentinel names, moved to the new master on any sign
//! of a failover.
//!
//! The master's address is asked of the sentinels at start, and again after a `READONLY` or
//! `MASTERDOWN` reply (the node was demoted), a dropped connection, or a `+switch-master`
//! event from any sentinel. redis-rs checks that a named master answers `ROLE` as master
//! before it is used, so nothing is sent to a demoted one once the sentinels know of the
//! failover. Commands that a demoted or loading server refused before running are sent again
//! to the new master until [`Timeouts::failover`] runs out.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    Pipeline, RedisConnectionInfo, RedisError, RedisResult, TlsCertificates, TlsMode, Value,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{is_demotion_sign, refused_before_running, reply_error_kind};
use crate::topology::{Credentials, Timeouts};

mod events;

use events::{follow_announcements, Announcements};

/// Pause between two lookups while no master is usable.
const LOOKUP_PAUSE: Duration = Duration::from_millis(100);

/// The master in use: its connection, a client for more connections (pub/sub), its address.
#[derive(Clone)]
pub(crate) struct Master {
    pub(crate) connection: MultiplexedConnection,
    pub(crate) client: Client,
    pub(crate) address: String,
    generation: u64,
}

/// A self-relocating connection to a Sentinel-watched master. Clones share it.
#[derive(Clone)]
pub(crate) struct SentinelMaster {
    shared: Arc<Shared>,
}

struct Shared {
    resolver: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<Master>>,
    /// Bumped whenever the master in use is dropped or replaced; subscribers follow it.
    generation: watch::Sender<u64>,
    master_name: String,
    config: AsyncConnectionConfig,
    timeouts: Timeouts,
    listeners: Mutex<Vec<tokio::task::AbortHandle>>,
    /// What the sentinels announced about our master's failovers.
    announcements: Announcements,
    /// The connection settings of the master (login, TLS), for an announced new address.
    template: Mutex<Option<ConnectionInfo>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Ok(listeners) = self.listeners.lock() {
            for listener in listeners.iter() {
                listener.abort();
            }
        }
    }
}

/// Everything needed to reach the sentinels and their master.
pub(crate) struct SentinelSetup<'a> {
    pub(crate) urls: &'a [String],
    pub(crate) master_name: &'a str,
    pub(crate) sentinel_credentials: Option<&'a Credentials>,
    pub(crate) tls: Option<&'a TlsCertificates>,
    pub(crate) timeouts: Timeouts,
}

impl SentinelMaster {
    /// Asks the sentinels for the master once and connects to it; starts following
    /// `+switch-master` on every sentinel.
    pub(crate) async fn connect(setup: SentinelSetup<'_>) -> RedisResult<Self> {
        let infos = setup
            .urls
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<RedisResult<Vec<ConnectionInfo>>>()?;
        let first = infos.first().ok_or_else(|| {
            RedisError::from((redis::ErrorKind::EmptySentinelList, "no sentinel URL"))
        })?;
        let data_login = first.redis_settings().clone();
        let uses_tls = matches!(first.addr(), ConnectionAddr::TcpTls { .. });

        let mut builder = SentinelClientBuilder::new(
            infos.iter().map(|info| info.addr().clone()),
            setup.master_name,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_db(data_login.db());
        if let Some(username) = data_login.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = data_login.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(credentials) = setup.sentinel_credentials {
            if let Some(username) = &credentials.username {
                builder = builder.set_client_to_sentinel_username(username);
            }
            builder = builder.set_client_to_sentinel_password(&credentials.password);
        }
        if uses_tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(certificates) = setup.tls {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates.clone());
            }
        }
        let resolver = builder.build()?;

        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(setup.timeouts.connect))
            .set_response_timeout(Some(setup.timeouts.response));
        let (generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            resolver: tokio::sync::Mutex::new(resolver),
            current: Mutex::new(None),
            generation,
            master_name: setup.master_name.to_owned(),
            config,
            timeouts: setup.timeouts,
            listeners: Mutex::new(Vec::new()),
            announcements: Announcements::new(setup.timeouts.failover),
            template: Mutex::new(None),
        });
        let master = SentinelMaster { shared };
        master.resolve(None).await?;

        let mut listeners = Vec::new();
        for info in infos {
            let info = sentinel_login(info, setup.sentinel_credentials);
            let client = match setup.tls {
                Some(certificates) if uses_tls => {
                    Client::build_with_tls(info, certificates.clone())?
                }
                _ => Client::open(info)?,
            };
            let task = tokio::spawn(follow_announcements(client, Arc::downgrade(&master.shared)));
            listeners.push(task.abort_handle());
        }
        if let Ok(mut slot) = master.shared.listeners.lock() {
            *slot = listeners;
        }
        Ok(master)
    }

    /// The master in use, asking the sentinels first when there is none.
    pub(crate) async fn master(&self) -> RedisResult<Master> {
        match self.current() {
            Some(master) => Ok(master),
            None => self.resolve(None).await,
        }
    }

    /// The address (`host:port`) of the master in use, if one is.
    pub(crate) fn address(&self) -> Option<String> {
        self.current().map(|master| master.address)
    }

    /// Drops the master in use if it is the one at `address` (a connection to it was lost),
    /// so that the next command asks the sentinels again.
    pub(crate) fn suspect(&self, address: String) {
        if let Some(master) = self.current() {
            if master.address == address {
                self.forget(master.generation);
            }
        }
    }

    /// Changes whenever the master in use is dropped or replaced.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.shared.generation.subscribe()
    }

    /// Sends `command` to the master, following a failover (see the module docs).
    pub(crate) async fn request(&self, command: &Cmd) -> RedisResult<Value> {
        let deadline = Instant::now() + self.shared.timeouts.failover;
        loop {
            let mut master = self.master_until(deadline).await?;
            match master.connection.req_packed_command(command).await {
                Ok(reply) => {
                    let kind = reply_error_kind(&reply);
                    if !self.after_refusal(&master, kind, deadline).await {
                        return Ok(reply);
                    }
                }
                Err(error) => return Err(self.after_error(&master, error)),
            }
        }
    }

    /// Sends `count` replies' worth of `pipeline` from `offset`, following a failover. A
    /// pipeline is sent again only when a reply shows the server refused its writes (a
    /// replica or a loading server applies none of them).
    pub(crate) async fn request_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let deadline = Instant::now() + self.shared.timeouts.failover;
        loop {
            let mut master = self.master_until(deadline).await?;
            match master
                .connection
                .req_packed_commands(pipeline, offset, count)
                .await
            {
                Ok(replies) => {
                    let kind = replies
                        .iter()
                        .map(reply_error_kind)
                        .find(|kind| refused_before_running(*kind));
                    if !self.after_refusal(&master, kind.flatten(), deadline).await {
                        return Ok(replies);
                    }
                }
                Err(error) => return Err(self.after_error(&master, error)),
            }
        }
    }

    /// The database of the master connections.
    pub(crate) fn db(&self) -> i64 {
        self.current()
            .map(|master| master.client.get_connection_info().redis_settings().db())
            .unwrap_or(0)
    }

    /// Whether to send again after a reply of `kind`: the server refused to run it, and
    /// time is left. A demoted master is dropped first.
    async fn after_refusal(
        &self,
        master: &Master,
        kind: Option<redis::ServerErrorKind>,
        deadline: Instant,
    ) -> bool {
        if !refused_before_running(kind) || Instant::now() >= deadline {
            return false;
        }
        if is_demotion_sign(kind) {
            tracing::info!(master = %master.address, ?kind, "master refused writes; asking the sentinels again");
            self.forget(master.generation);
        }
        tokio::time::sleep(LOOKUP_PAUSE).await;
        true
    }

    /// A failed send: the connection is suspect, so the next command asks the sentinels.
    fn after_error(&self, master: &Master, error: RedisError) -> RedisError {
        if crate::is_transient(&error) {
            tracing::info!(master = %master.address, %error, "lost the master; asking the sentinels again");
            self.forget(master.generation);
        }
        error
    }

    /// The master, asking the sentinels again until one is usable or `deadline` passes.
    async fn master_until(&self, deadline: Instant) -> RedisResult<Master> {
        loop {
            match self.master().await {
                Ok(master) => return Ok(master),
                Err(error) if crate::is_transient(&error) && Instant::now() < deadline => {
                    tracing::debug!(%error, "no usable master yet");
                    tokio::time::sleep(LOOKUP_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn current(&self) -> Option<Master> {
        self.shared
            .current
            .lock()
            .ok()
            .and_then(|current| current.clone())
    }

    /// Drops the master in use if it is still the one of `generation`.
    fn forget(&self, generation: u64) {
        self.shared.forget(Some(generation));
    }

    /// Asks the sentinels for the master and connects to it, unless another caller already
    /// replaced the master of `seen` meanwhile.
    async fn resolve(&self, seen: Option<u64>) -> RedisResult<Master> {
        let mut resolver = self.shared.resolver.lock().await;
        if let Some(master) = self.current() {
            if seen != Some(master.generation) {
                return Ok(master);
            }
        }
        if self.shared.announcements.promoting() {
            return Err(RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "failover in progress: waiting for the sentinels to announce the new master",
            )));
        }
        let limit = self.shared.timeouts.connect + self.shared.timeouts.response;
        let (client, connection) = tokio::time::timeout(limit, self.lookup(&mut resolver))
            .await
            .map_err(|_| timed_out("asking the sentinels for the master", limit))??;
        let address = client.get_connection_info().addr().to_string();
        let generation = self.shared.generation.borrow().wrapping_add(1);
        if let Ok(mut template) = self.shared.template.lock() {
            *template = Some(client.get_connection_info().clone());
        }
        let master = Master {
            connection,
            client,
            address,
            generation,
        };
        if let Ok(mut current) = self.shared.current.lock() {
            *current = Some(master.clone());
        }
        self.shared.generation.send_replace(generation);
        tracing::info!(master = %master.address, name = %self.shared.master_name, "using the master named by the sentinels");
        Ok(master)
    }
}

impl SentinelMaster {
    /// A client and connection for the master: the one a `+switch-master` announced if it
    /// answers as master, else the one the sentinels name, unless that is a master they
    /// announced as replaced (a lagging sentinel still names it until it learns of the
    /// failover, and the old master keeps accepting writes until it is demoted).
    async fn lookup(
        &self,
        resolver: &mut SentinelClient,
    ) -> RedisResult<(Client, MultiplexedConnection)> {
        let template = self.shared.template.lock().ok().and_then(|t| t.clone());
        if let (Some(template), Some((host, port))) =
            (template, self.shared.announcements.announced_master())
        {
            let client = Client::open(events::with_address(template, host, port))?;
            match self.connect_master(&client).await {
                Ok(connection) => return Ok((client, connection)),
                Err(error) => tracing::debug!(%error, "the announced master is not usable yet"),
            }
        }
        let client = resolver.async_get_client().await?;
        let address = client.get_connection_info().addr().to_string();
        if self.shared.announcements.is_replaced(&address) {
            return Err(RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "a sentinel still names the replaced master",
                address,
            )));
        }
        let connection = self.connect_master(&client).await?;
        Ok((client, connection))
    }

    /// A connection to `client`'s server, if it answers `ROLE` as master.
    async fn connect_master(&self, client: &Client) -> RedisResult<MultiplexedConnection> {
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&self.shared.config)
            .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut connection).await?;
        match role.first() {
            Some(Value::BulkString(role)) if role.as_slice() == b"master" => Ok(connection),
            _ => Err(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "not a master (yet)",
            ))),
        }
    }
}

impl Shared {
    /// Drops the master in use (only if it is of `generation`, when given).
    fn forget(&self, generation: Option<u64>) {
        let Ok(mut current) = self.current.lock() else {
            return;
        };
        let matches = match (&*current, generation) {
            (Some(master), Some(generation)) => master.generation == generation,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if matches {
            *current = None;
            self.generation
                .send_modify(|generation| *generation = generation.wrapping_add(1));
        }
    }
}

/// `info` with the sentinels' own login instead of the data nodes' one.
fn sentinel_login(info: ConnectionInfo, credentials: Option<&Credentials>) -> ConnectionInfo {
    let mut login = RedisConnectionInfo::default();
    if let Some(credentials) = credentials {
        if let Some(username) = &credentials.username {
            login = login.set_username(username);
        }
        login = login.set_password(&credentials.password);
    }
    info.set_redis_settings(login)
}

fn timed_out(what: &str, limit: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what}: no answer within {limit:?}"),
    ))
}
