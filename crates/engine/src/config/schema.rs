//! The schema walk: the YAML tree to a [`Config`], rejecting unknown keys by their dotted
//! path and remembering the line of every key for later error messages.

use std::collections::{BTreeMap, HashMap};

use delayq_storage::QueueName;

use super::backend::POSTGRES_KEYS;
use super::error::ConfigError;
use super::http::HttpConfig;
use super::topology::{SentinelConfig, TlsConfig, SENTINEL_KEYS, TLS_KEYS, TOPOLOGY_KEYS};
use super::types::{
    BackoffConfig, Config, EngineConfig, NodeConfig, QueueConfig, RateLimit, RedisConfig,
};
use super::values::{count, duration, invalid, size, string, strings};
use super::yaml::{self, Key, Node, Value};
use crate::recurring::{RawSpec, RecurringSpec, ScheduleName};

/// The top-level sections.
pub(crate) const TOP_KEYS: &[&str] = &[
    "backend",
    "redis",
    "postgres",
    "http",
    "node",
    "engine",
    "queue_defaults",
    "queues",
    "recurring",
];
/// The keys of `http:`.
pub(crate) const HTTP_KEYS: &[&str] = &[
    "listen",
    "token",
    "read_only",
    "allowed_hosts",
    "header_timeout",
    "request_timeout",
    "max_connections",
];
/// The keys of `redis:`.
pub(crate) const REDIS_KEYS: &[&str] = &[
    "url",
    "key_prefix",
    "response_timeout",
    "cluster",
    "sentinel",
    "tls",
    "wait_replicas",
    "wait_timeout",
];
/// The keys of `node:`.
pub(crate) const NODE_KEYS: &[&str] = &[
    "name",
    "heartbeat_period",
    "heartbeat_ttl",
    "start_timeout",
    "max_running",
];
/// The keys of `engine:`.
pub(crate) const ENGINE_KEYS: &[&str] = &[
    "pull_period",
    "idle_pull_period",
    "prefetch_window",
    "max_prefetched",
    "claim_batch",
    "lease",
    "shutdown_grace",
    "executed_retention",
    "max_payload",
];
/// The keys of `queue_defaults:` and of each entry of `queues:`.
pub(crate) const QUEUE_KEYS: &[&str] = &[
    "partitions",
    "concurrency",
    "max_attempts",
    "backoff",
    "timeout",
    "rate_limit",
    "global_concurrency",
    "flow_keys",
    "per_key_concurrency",
    "per_key_rate",
    "per_key_order",
];
/// The keys of each entry of `recurring:`: the fields of a spec.
pub(crate) const RECURRING_KEYS: &[&str] = &RawSpec::FIELDS;
/// The keys of a queue's `backoff:`.
pub(crate) const BACKOFF_KEYS: &[&str] = &["initial", "max"];

/// The keys allowed next to the unknown key `key` (a dotted path), for the error's hint.
pub(crate) fn known_keys_beside(key: &str) -> &'static [&'static str] {
    let Some((parent, _)) = key.rsplit_once('.') else {
        return TOP_KEYS;
    };
    match parent {
        "redis" => REDIS_KEYS,
        "redis.sentinel" => SENTINEL_KEYS,
        "redis.tls" => TLS_KEYS,
        "postgres" => POSTGRES_KEYS,
        "http" => HTTP_KEYS,
        "node" => NODE_KEYS,
        "engine" => ENGINE_KEYS,
        "queue_defaults" => QUEUE_KEYS,
        _ if parent.ends_with(".backoff") => BACKOFF_KEYS,
        _ if parent.starts_with("queues.") => QUEUE_KEYS,
        _ if parent.starts_with("recurring.") => RECURRING_KEYS,
        _ => TOP_KEYS,
    }
}

/// The line of each key that was written in the file, by dotted path; `None` for a key whose
/// value was replaced from elsewhere (the environment).
#[derive(Debug, Default)]
pub(crate) struct KeyLines(HashMap<String, Option<usize>>);

impl KeyLines {
    /// Gives a line-less value error the line of its key, or of the nearest enclosing key
    /// that was written (a queue inheriting a bad default points at the queue).
    pub(crate) fn locate(&self, error: ConfigError) -> ConfigError {
        let Some(mut key) = error.key_path() else {
            return error;
        };
        loop {
            if let Some(line) = self.0.get(&key) {
                return error.or_at_line(*line);
            }
            match key.rsplit_once('.') {
                Some((parent, _)) => key = parent.to_owned(),
                None => return error,
            }
        }
    }

    /// Notes that the value of `key` no longer comes from the file (an environment
    /// override), so errors about it point at no line, not even its section's.
    pub(crate) fn forget(&mut self, key: &str) {
        self.0.insert(key.to_owned(), None);
    }
}

/// A configuration read from text, not yet validated.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) config: Config,
    pub(crate) lines: KeyLines,
}

/// Reads `text` (named `source_name` in errors) into a configuration; missing sections and
/// keys take their defaults.
pub(crate) fn parse(text: &str, source_name: &str) -> Result<Parsed, ConfigError> {
    let root = yaml::parse(text, source_name)?;
    let mut walk = Walk {
        source_name,
        lines: KeyLines::default(),
    };
    let mut config = Config::default();
    let mut queues = None;
    for (key, value) in walk.section("", &root)? {
        let path = walk.record("", key, value);
        match key.name.as_str() {
            "backend" => {
                config.backend = string(&path, value)?
                    .parse()
                    .map_err(|reason: String| invalid(&path, value, reason))?
            }
            "redis" => walk.redis(value, &mut config.redis)?,
            "postgres" => walk.postgres(value, &mut config.postgres)?,
            "http" => walk.http(value, &mut config.http)?,
            "node" => walk.node(value, &mut config.node)?,
            "engine" => walk.engine(value, &mut config.engine)?,
            "queue_defaults" => walk.queue(&path, value, &mut config.queue_defaults)?,
            // Read last, once `queue_defaults` is known, whatever the order in the file.
            "queues" => queues = Some(value),
            "recurring" => walk.recurring(value, &mut config.recurring)?,
            _ => return Err(walk.unknown(path, key)),
        }
    }
    if let Some(queues) = queues {
        for (key, value) in walk.section("queues", queues)? {
            let path = walk.record("queues", key, value);
            walk.lines.0.insert(path.clone(), Some(key.line));
            QueueName::new(&key.name).map_err(|_| queue_name_error(key))?;
            let mut queue = config.queue_defaults;
            walk.queue(&path, value, &mut queue)?;
            config.queues.insert(key.name.clone(), queue);
        }
    }
    Ok(Parsed {
        config,
        lines: walk.lines,
    })
}

/// What a queue name must look like, for error messages.
pub(crate) const QUEUE_NAME_RULE: &str =
    "queue names are 1..=64 characters of A-Z, a-z, 0-9, '_', '.' and '-'";

fn queue_name_error(key: &Key) -> ConfigError {
    ConfigError::InvalidQueueName {
        name: key.name.clone(),
        reason: QUEUE_NAME_RULE.to_owned(),
        line: Some(key.line),
    }
}

struct Walk<'a> {
    source_name: &'a str,
    lines: KeyLines,
}

impl Walk<'_> {
    /// The entries of the mapping at `path`; an empty section is an empty mapping.
    fn section<'n>(&self, path: &str, node: &'n Node) -> Result<&'n [(Key, Node)], ConfigError> {
        match &node.value {
            Value::Map(entries) => Ok(entries),
            Value::Null => Ok(&[]),
            _ => Err(invalid(
                if path.is_empty() { "(document)" } else { path },
                node,
                "expected a mapping of keys to values",
            )),
        }
    }

    /// Records where `key` (under `parent`) was written and returns its dotted path.
    fn record(&mut self, parent: &str, key: &Key, value: &Node) -> String {
        let path = if parent.is_empty() {
            key.name.clone()
        } else {
            format!("{parent}.{}", key.name)
        };
        self.lines.0.insert(path.clone(), Some(value.line));
        path
    }

    fn unknown(&self, path: String, key: &Key) -> ConfigError {
        ConfigError::UnknownKey {
            source_name: self.source_name.to_owned(),
            key: path,
            line: key.line,
        }
    }

    fn redis(&mut self, node: &Node, redis: &mut RedisConfig) -> Result<(), ConfigError> {
        let mut topology: Option<(String, usize)> = None;
        for (key, value) in self.section("redis", node)? {
            let path = self.record("redis", key, value);
            if TOPOLOGY_KEYS.contains(&path.as_str()) {
                if let Some((first, line)) = &topology {
                    return Err(invalid(
                        &path,
                        value,
                        format!(
                            "give exactly one of redis.url, redis.cluster and redis.sentinel \
                             ({first} is set on line {line})"
                        ),
                    ));
                }
                topology = Some((path.clone(), key.line));
            }
            match key.name.as_str() {
                "url" => redis.url = string(&path, value)?,
                "key_prefix" => redis.key_prefix = string(&path, value)?,
                "response_timeout" => redis.response_timeout = duration(&path, value)?,
                "cluster" => redis.cluster = strings(&path, value)?,
                "sentinel" => redis.sentinel = Some(self.sentinel(&path, value)?),
                "tls" => redis.tls = Some(self.tls(&path, value)?),
                "wait_replicas" => redis.wait_replicas = count(&path, value)?,
                "wait_timeout" => redis.wait_timeout = duration(&path, value)?,
                _ => return Err(self.unknown(path, key)),
            }
        }
        Ok(())
    }

    fn postgres(
        &mut self,
        node: &Node,
        postgres: &mut delayq_postgres::PostgresConfig,
    ) -> Result<(), ConfigError> {
        for (key, value) in self.section("postgres", node)? {
            let path = self.record("postgres", key, value);
            match key.name.as_str() {
                "url" => postgres.url = string(&path, value)?,
                "schema" => postgres.schema = string(&path, value)?,
                "pool_size" => postgres.pool_size = count(&path, value)?,
                "statement_timeout" => postgres.statement_timeout = duration(&path, value)?,
                _ => return Err(self.unknown(path, key)),
            }
        }
        Ok(())
    }

    fn sentinel(&mut self, path: &str, node: &Node) -> Result<SentinelConfig, ConfigError> {
        let mut sentinel = SentinelConfig::default();
        for (key, value) in self.section(path, node)? {
            let key_path = self.record(path, key, value);
            match key.name.as_str() {
                "urls" => sentinel.urls = strings(&key_path, value)?,
                "master" => sentinel.master = string(&key_path, value)?,
                "username" => sentinel.username = Some(string(&key_path, value)?),
                "password" => sentinel.password = Some(string(&key_path, value)?),
                _ => return Err(self.unknown(key_path, key)),
            }
        }
        Ok(sentinel)
    }

    fn tls(&mut self, path: &str, node: &Node) -> Result<TlsConfig, ConfigError> {
        let mut tls = TlsConfig::default();
        for (key, value) in self.section(path, node)? {
            let key_path = self.record(path, key, value);
            let file = Some(std::path::PathBuf::from(string(&key_path, value)?));
            match key.name.as_str() {
                "ca_file" => tls.ca_file = file,
                "cert_file" => tls.cert_file = file,
                "key_file" => tls.key_file = file,
                _ => return Err(self.unknown(key_path, key)),
            }
        }
        Ok(tls)
    }

    fn http(&mut self, node: &Node, http: &mut HttpConfig) -> Result<(), ConfigError> {
        for (key, value) in self.section("http", node)? {
            let path = self.record("http", key, value);
            match key.name.as_str() {
                "listen" => http.listen = Some(string(&path, value)?),
                "token" => http.token = Some(string(&path, value)?),
                "read_only" => match value.value {
                    Value::Bool(flag) => http.read_only = flag,
                    _ => return Err(invalid(&path, value, "expected true or false")),
                },
                "allowed_hosts" => http.allowed_hosts = strings(&path, value)?,
                "header_timeout" => http.header_timeout = duration(&path, value)?,
                "request_timeout" => http.request_timeout = duration(&path, value)?,
                "max_connections" => http.max_connections = count(&path, value)?,
                _ => return Err(self.unknown(path, key)),
            }
        }
        Ok(())
    }

    fn node(&mut self, node: &Node, into: &mut NodeConfig) -> Result<(), ConfigError> {
        for (key, value) in self.section("node", node)? {
            let path = self.record("node", key, value);
            match key.name.as_str() {
                "name" => into.name = string(&path, value)?,
                "heartbeat_period" => into.heartbeat_period = duration(&path, value)?,
                "heartbeat_ttl" => into.heartbeat_ttl = duration(&path, value)?,
                "start_timeout" => into.start_timeout = duration(&path, value)?,
                "max_running" => into.max_running = count(&path, value)?,
                _ => return Err(self.unknown(path, key)),
            }
        }
        Ok(())
    }

    fn engine(&mut self, node: &Node, engine: &mut EngineConfig) -> Result<(), ConfigError> {
        for (key, value) in self.section("engine", node)? {
            let path = self.record("engine", key, value);
            match key.name.as_str() {
                "pull_period" => engine.pull_period = duration(&path, value)?,
                "idle_pull_period" => engine.idle_pull_period = duration(&path, value)?,
                "prefetch_window" => engine.prefetch_window = duration(&path, value)?,
                "max_prefetched" => engine.max_prefetched = count(&path, value)?,
                "claim_batch" => engine.claim_batch = count(&path, value)?,
                "lease" => engine.lease = duration(&path, value)?,
                "shutdown_grace" => engine.shutdown_grace = duration(&path, value)?,
                "executed_retention" => engine.executed_retention = duration(&path, value)?,
                "max_payload" => engine.max_payload = size(&path, value)?,
                _ => return Err(self.unknown(path, key)),
            }
        }
        Ok(())
    }

    /// Overlays the keys written at `path` on `queue` (which starts as the defaults).
    fn queue(
        &mut self,
        path: &str,
        node: &Node,
        queue: &mut QueueConfig,
    ) -> Result<(), ConfigError> {
        for (key, value) in self.section(path, node)? {
            let key_path = self.record(path, key, value);
            match key.name.as_str() {
                "partitions" => queue.partitions = count(&key_path, value)?,
                "concurrency" => queue.concurrency = count(&key_path, value)?,
                "max_attempts" => queue.max_attempts = count(&key_path, value)?,
                "backoff" => self.backoff(&key_path, value, &mut queue.backoff)?,
                "timeout" => queue.timeout = duration(&key_path, value)?,
                "rate_limit" => {
                    let text = string(&key_path, value)?;
                    let limit = RateLimit::parse(&text)
                        .map_err(|reason| invalid(&key_path, value, reason))?;
                    queue.rate_limit = Some(limit);
                }
                "global_concurrency" => {
                    let slots: u32 = count(&key_path, value)?;
                    if slots == 0 {
                        return Err(invalid(&key_path, value, "must be at least 1"));
                    }
                    queue.global_concurrency = Some(slots);
                }
                "flow_keys" => match value.value {
                    Value::Bool(flag) => queue.flow_keys = flag,
                    _ => return Err(invalid(&key_path, value, "expected true or false")),
                },
                "per_key_concurrency" => {
                    let slots: u32 = count(&key_path, value)?;
                    if slots == 0 {
                        return Err(invalid(&key_path, value, "must be at least 1"));
                    }
                    queue.per_key_concurrency = Some(slots);
                }
                "per_key_rate" => {
                    let text = string(&key_path, value)?;
                    let limit = RateLimit::parse(&text)
                        .map_err(|reason| invalid(&key_path, value, reason))?;
                    if u32::try_from(limit.count).is_err() {
                        return Err(invalid(&key_path, value, "the count is too large"));
                    }
                    queue.per_key_rate = Some(limit);
                }
                "per_key_order" => match string(&key_path, value)?.as_str() {
                    "fifo" => queue.per_key_fifo = true,
                    "none" => queue.per_key_fifo = false,
                    _ => {
                        return Err(invalid(
                            &key_path,
                            value,
                            "expected fifo (a key's tasks one at a time, in due order) or none",
                        ))
                    }
                },
                _ => return Err(self.unknown(key_path, key)),
            }
        }
        Ok(())
    }

    /// Reads `recurring:`: each entry a schedule name and its spec, validated here so that a
    /// bad one is refused at start with its key and line.
    fn recurring(
        &mut self,
        node: &Node,
        into: &mut BTreeMap<String, RecurringSpec>,
    ) -> Result<(), ConfigError> {
        for (name_key, entry) in self.section("recurring", node)? {
            let path = self.record("recurring", name_key, entry);
            ScheduleName::new(&name_key.name).map_err(|error| ConfigError::InvalidValue {
                key: path.clone(),
                value: name_key.name.clone(),
                reason: error.reason,
                line: Some(name_key.line),
            })?;
            let mut raw = RawSpec::default();
            let mut lines: HashMap<&'static str, usize> = HashMap::new();
            for (key, value) in self.section(&path, entry)? {
                let key_path = self.record(&path, key, value);
                let Some(&field) = RECURRING_KEYS.iter().find(|field| **field == key.name) else {
                    return Err(self.unknown(key_path, key));
                };
                lines.insert(field, value.line);
                let text = string(&key_path, value)?;
                if let Some(slot) = raw.field_mut(field) {
                    *slot = Some(text);
                }
            }
            let spec = raw.validate().map_err(|error| ConfigError::InvalidValue {
                key: format!("{path}.{}", error.field),
                value: error.value.clone(),
                reason: error.reason.clone(),
                line: Some(lines.get(error.field).copied().unwrap_or(name_key.line)),
            })?;
            into.insert(name_key.name.clone(), spec);
        }
        Ok(())
    }

    fn backoff(
        &mut self,
        path: &str,
        node: &Node,
        backoff: &mut BackoffConfig,
    ) -> Result<(), ConfigError> {
        for (key, value) in self.section(path, node)? {
            let key_path = self.record(path, key, value);
            match key.name.as_str() {
                "initial" => backoff.initial = duration(&key_path, value)?,
                "max" => backoff.max = duration(&key_path, value)?,
                _ => return Err(self.unknown(key_path, key)),
            }
        }
        Ok(())
    }
}
