//! Lua scripts by SHA, routed by `KEYS[1]`'s slot, loaded again where a server lost them.
//!
//! A script missing on a server (a restart, `SCRIPT FLUSH`, a replica promoted to master)
//! answers `NOSCRIPT`: the script is then loaded on the master of that call's slot and only
//! the calls that answered `NOSCRIPT` are sent again (they did nothing, so this never applies
//! a call twice).

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use redis::cluster_routing::Slot;
use redis::{Cmd, ServerErrorKind, ToRedisArgs, Value};

use crate::connection::RedisConnection;
use crate::error::{Error, Result};

/// A Lua script: its source and SHA1. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Script {
    code: Arc<str>,
    inner: redis::Script,
}

impl Script {
    /// A script with `code` (its SHA1 is computed here).
    pub fn new(code: &str) -> Self {
        Script {
            code: Arc::from(code),
            inner: redis::Script::new(code),
        }
    }

    /// The script's SHA1, as `EVALSHA` wants it.
    pub fn hash(&self) -> &str {
        self.inner.get_hash()
    }

    /// The source.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The same script as a redis-rs [`redis::Script`].
    pub fn as_redis(&self) -> &redis::Script {
        &self.inner
    }

    fn load_command(&self) -> Cmd {
        let mut command = redis::cmd("SCRIPT");
        command.arg("LOAD").arg(self.code());
        command
    }
}

/// One call of a [`Script`]: its `KEYS` and `ARGV`. On a cluster every key must share one
/// slot; the call is sent to the master of `KEYS[1]`'s slot.
#[derive(Debug, Clone)]
pub struct ScriptCall<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` with no keys or arguments yet.
    pub fn new(script: &'a Script) -> Self {
        ScriptCall {
            script,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds a key (`KEYS[n]`).
    pub fn key(mut self, key: impl ToRedisArgs) -> Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[n]`).
    pub fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// The slot of `KEYS[1]` (`None` without keys).
    pub fn slot(&self) -> Option<Slot> {
        self.keys.first().map(Slot::for_key)
    }

    /// `EVALSHA <sha> <numkeys> <keys...> <args...>`.
    pub fn command(&self) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command
            .arg(self.script.hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        command
    }
}

impl RedisConnection {
    /// Loads `scripts` on every master (at start; later losses are repaired per call).
    pub async fn load_scripts(&self, scripts: &[&Script]) -> Result<()> {
        for script in scripts {
            let _: String = self.query("SCRIPT LOAD", &script.load_command()).await?;
        }
        Ok(())
    }

    /// Runs one script call on the master of its slot, loading the script there first when
    /// that master answers `NOSCRIPT`. The reply is returned as is; a script's error reply
    /// is an [`Error::Command`] with the script's code.
    pub async fn run_script(&self, call: &ScriptCall<'_>) -> Result<Value> {
        let mut loaded = false;
        loop {
            let reply = match call.slot() {
                Some(slot) => self.send_at_slot(slot, &call.command()).await,
                None => self.send(&call.command()).await,
            };
            let reply = reply.map_err(|error| self.error("EVALSHA", &error))?;
            match reply {
                Value::ServerError(error)
                    if error.kind() == Some(ServerErrorKind::NoScript) && !loaded =>
                {
                    self.reload(call).await?;
                    loaded = true;
                }
                Value::ServerError(error) => {
                    return Err(self.error("EVALSHA", &redis::RedisError::from(error)))
                }
                reply => return Ok(reply),
            }
        }
    }

    /// Runs many script calls: grouped by slot (one group on a single server), one pipeline
    /// per group, the groups in parallel. Returns one result per call, in order. Calls that
    /// answered `NOSCRIPT` are sent again once after loading the script on their master.
    pub async fn run_scripts(&self, calls: &[ScriptCall<'_>]) -> Vec<Result<Value>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of: HashMap<Option<Slot>, usize> = HashMap::new();
        for (index, call) in calls.iter().enumerate() {
            let slot = match self.kind() {
                crate::TopologyKind::Cluster => call.slot(),
                _ => None,
            };
            let group = *group_of.entry(slot).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[group].push(index);
        }
        let results = join_all(groups.iter().map(|members| self.run_group(calls, members))).await;
        let mut ordered: Vec<Option<Result<Value>>> = (0..calls.len()).map(|_| None).collect();
        for (members, replies) in groups.iter().zip(results) {
            for (&index, reply) in members.iter().zip(replies) {
                ordered[index] = Some(reply);
            }
        }
        ordered
            .into_iter()
            .map(|reply| {
                reply.unwrap_or_else(|| {
                    Err(Error::Command {
                        operation: "EVALSHA",
                        transient: false,
                        code: None,
                        message: "a script call got no reply".to_owned(),
                    })
                })
            })
            .collect()
    }

    /// One slot's calls in one pipeline (again for those that answered `NOSCRIPT`).
    async fn run_group(&self, calls: &[ScriptCall<'_>], members: &[usize]) -> Vec<Result<Value>> {
        let mut results: Vec<Option<Result<Value>>> = members.iter().map(|_| None).collect();
        let mut to_send: Vec<usize> = (0..members.len()).collect();
        let mut loaded = false;
        while !to_send.is_empty() {
            let mut pipeline = redis::pipe();
            pipeline.ignore_errors();
            for &position in &to_send {
                pipeline.add_command(calls[members[position]].command());
            }
            let replies: Vec<Value> = match self.query_pipeline("EVALSHA", &pipeline).await {
                Ok(replies) => replies,
                Err(error) => {
                    for &position in &to_send {
                        results[position] = Some(Err(copy(&error)));
                    }
                    break;
                }
            };
            let mut again = Vec::new();
            for (&position, reply) in to_send.iter().zip(replies) {
                results[position] = Some(match reply {
                    Value::ServerError(error)
                        if error.kind() == Some(ServerErrorKind::NoScript) && !loaded =>
                    {
                        again.push(position);
                        continue;
                    }
                    Value::ServerError(error) => {
                        Err(self.error("EVALSHA", &redis::RedisError::from(error)))
                    }
                    reply => Ok(reply),
                });
            }
            if !again.is_empty() {
                loaded = true;
                let mut scripts: Vec<&ScriptCall<'_>> = Vec::new();
                for &position in &again {
                    let call = &calls[members[position]];
                    if !scripts
                        .iter()
                        .any(|seen| seen.script.hash() == call.script.hash())
                    {
                        scripts.push(call);
                    }
                }
                for call in scripts {
                    if let Err(error) = self.reload(call).await {
                        for &position in &again {
                            results[position] = Some(Err(copy(&error)));
                        }
                        again.clear();
                        break;
                    }
                }
            }
            to_send = again;
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(Error::Command {
                        operation: "EVALSHA",
                        transient: false,
                        code: None,
                        message: "a script call got no reply".to_owned(),
                    })
                })
            })
            .collect()
    }

    /// Loads `call`'s script on the master of its slot.
    async fn reload(&self, call: &ScriptCall<'_>) -> Result<()> {
        tracing::info!(
            sha = call.script.hash(),
            "Redis lost a script (restart, SCRIPT FLUSH or a new master); loading it again"
        );
        let command = call.script.load_command();
        let reply = match call.slot() {
            Some(slot) => self.send_at_slot(slot, &command).await,
            None => self.send(&command).await,
        };
        reply
            .and_then(|value| value.extract_error())
            .map(|_| ())
            .map_err(|error| self.error("SCRIPT LOAD", &error))
    }
}

/// A copy of `error` for each call of a failed group.
fn copy(error: &Error) -> Error {
    match error {
        Error::Command {
            operation,
            transient,
            code,
            message,
        } => Error::Command {
            operation,
            transient: *transient,
            code: code.clone(),
            message: message.clone(),
        },
        other => Error::Command {
            operation: "EVALSHA",
            transient: other.is_transient(),
            code: None,
            message: other.to_string(),
        },
    }
}
