//! Running [`ScriptCall`]s: one at a time or grouped by slot in pipelines, with `FCALL` or
//! `EVALSHA`, repairing what a server lost (see the `scripts` module) and sending again only
//! the calls that did not run.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use futures::future::join_all;
use redis::cluster_routing::Slot;
use redis::{Cmd, RedisError, Value};

use crate::connection::RedisConnection;
use crate::error::{Error, Result};
use crate::library::{already_loaded, functions_unavailable, repair_for, Library, Repair};
use crate::scripts::{Script, ScriptCall};

impl RedisConnection {
    /// Whether this connection calls library scripts with `FCALL` (it stops, for good, when
    /// a server shows it cannot: see [`crate::ConnectOptions::functions`]).
    pub fn uses_functions(&self) -> bool {
        self.shared.functions.load(Ordering::Relaxed)
    }

    /// Loads `scripts` on every master (at start; later losses are repaired per call).
    pub async fn load_scripts(&self, scripts: &[&Script]) -> Result<()> {
        for script in scripts {
            let _: String = self.query("SCRIPT LOAD", &script.load_command()).await?;
        }
        Ok(())
    }

    /// Makes `library`'s scripts callable: `FUNCTION LOAD` on every master, or, where
    /// Functions cannot be used (Redis < 7, a user without `+function|load`, or
    /// [`crate::ConnectOptions::functions`] off), `SCRIPT LOAD` of their `EVALSHA` twins.
    /// Later losses (`FUNCTION FLUSH`, a new master) are repaired per call. Fails on anything
    /// else, e.g. a library that does not compile or a user that may not load scripts either.
    pub async fn load_library(&self, library: &Library) -> Result<()> {
        if self.uses_functions() {
            match self.load_library_on_masters(library).await {
                Ok(()) => {
                    tracing::debug!(library = library.name(), "Redis Functions library loaded");
                    return Ok(());
                }
                Err(LoadFailure::Unavailable(reason)) => self.stop_using_functions(&reason),
                Err(LoadFailure::Failed(error)) => return Err(error),
            }
        }
        let fallbacks: Vec<&Script> = library.fallbacks().iter().collect();
        self.load_scripts(&fallbacks).await
    }

    /// `FUNCTION LOAD` on each master in turn.
    async fn load_library_on_masters(
        &self,
        library: &Library,
    ) -> std::result::Result<(), LoadFailure> {
        let slots = self.master_slots().await.map_err(LoadFailure::Failed)?;
        for slot in slots.into_iter().filter_map(Slot::new) {
            self.load_library_at(Some(slot), library).await?;
        }
        Ok(())
    }

    /// `FUNCTION LOAD` on the master of `slot` (the one master without a slot). A library
    /// already there counts as loaded.
    async fn load_library_at(
        &self,
        slot: Option<Slot>,
        library: &Library,
    ) -> std::result::Result<(), LoadFailure> {
        let reply = self.send_to(slot, &library.load_command()).await;
        match reply.and_then(|value| value.extract_error()) {
            Ok(_) => Ok(()),
            Err(error) if already_loaded(&error) => Ok(()),
            Err(error) if functions_unavailable(&error) => {
                Err(LoadFailure::Unavailable(error.to_string()))
            }
            Err(error) => Err(LoadFailure::Failed(self.error("FUNCTION LOAD", &error))),
        }
    }

    /// From now on, calls of library scripts go out as `EVALSHA`.
    fn stop_using_functions(&self, reason: &str) {
        if self.shared.functions.swap(false, Ordering::Relaxed) {
            let reason = crate::redact::scrub(reason, &self.shared.secrets);
            tracing::warn!(
                redis = %self.describe(),
                %reason,
                "Redis Functions cannot be used (Redis < 7, or an ACL user without +fcall \
                 +function|load); calling the same code as EVALSHA scripts, which costs Redis \
                 more per call"
            );
        }
    }

    /// Runs one script call on the master of its slot, repairing a lost script or library
    /// there first. The reply is returned as is; a script's error reply is an
    /// [`Error::Command`] with the script's code.
    pub async fn run_script(&self, call: &ScriptCall<'_>) -> Result<Value> {
        let mut repaired: Vec<Repair> = Vec::new();
        loop {
            let way = call.way(self.uses_functions());
            let reply = self
                .send_to(call.slot(), &call.command_as(way))
                .await
                .map_err(|error| self.error(way.operation(), &error))?;
            let Value::ServerError(error) = reply else {
                return Ok(reply);
            };
            match repair_for(&error) {
                Some(repair) if may_repair(&repaired, repair) => {
                    self.repair(call, repair, &error.to_string()).await?;
                    repaired.push(repair);
                }
                _ => return Err(self.error(way.operation(), &RedisError::from(error))),
            }
        }
    }

    /// Runs many script calls: grouped by slot (one group on a single server), one pipeline
    /// per group, the groups in parallel. Returns one result per call, in order. Calls that
    /// did not run for want of a script or library are sent again after the repair.
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
        ordered.into_iter().map(unanswered).collect()
    }

    /// One slot's calls in one pipeline (again for those that asked for a repair).
    async fn run_group(&self, calls: &[ScriptCall<'_>], members: &[usize]) -> Vec<Result<Value>> {
        let mut results: Vec<Option<Result<Value>>> = members.iter().map(|_| None).collect();
        let mut to_send: Vec<usize> = (0..members.len()).collect();
        let mut repaired: Vec<Repair> = Vec::new();
        while !to_send.is_empty() {
            let functions = self.uses_functions();
            let mut pipeline = redis::pipe();
            pipeline.ignore_errors();
            for &position in &to_send {
                let call = &calls[members[position]];
                pipeline.add_command(call.command_as(call.way(functions)));
            }
            let operation = if functions { "FCALL" } else { "EVALSHA" };
            let replies: Vec<Value> = match self.query_pipeline(operation, &pipeline).await {
                Ok(replies) => replies,
                Err(error) => {
                    for &position in &to_send {
                        results[position] = Some(Err(error.copy_for_group("EVALSHA")));
                    }
                    break;
                }
            };
            // The calls to send again, each with the repair it asked for.
            let mut again: Vec<(usize, Repair, String)> = Vec::new();
            for (&position, reply) in to_send.iter().zip(replies) {
                let call = &calls[members[position]];
                let way = call.way(functions);
                results[position] = Some(match reply {
                    Value::ServerError(error) => match repair_for(&error) {
                        Some(repair) if may_repair(&repaired, repair) => {
                            again.push((position, repair, error.to_string()));
                            continue;
                        }
                        _ => Err(self.error(way.operation(), &RedisError::from(error))),
                    },
                    reply => Ok(reply),
                });
            }
            let mut done: Vec<(Repair, &str)> = Vec::new();
            let mut failed: Option<Error> = None;
            for (position, repair, reason) in &again {
                let call = &calls[members[*position]];
                // One repair per kind (per script, for a lost script) is enough for the group.
                let key = match repair {
                    Repair::LoadScript => call.script.hash(),
                    _ => "",
                };
                if failed.is_some() || done.contains(&(*repair, key)) {
                    continue;
                }
                done.push((*repair, key));
                if let Err(error) = self.repair(call, *repair, reason).await {
                    failed = Some(error);
                }
            }
            if let Some(error) = failed {
                for (position, _, _) in &again {
                    results[*position] = Some(Err(error.copy_for_group("EVALSHA")));
                }
                break;
            }
            // One round counts once per kind of repair, however many scripts it loaded.
            for kind in [Repair::LoadScript, Repair::LoadLibrary, Repair::UseScripts] {
                if done.iter().any(|(repair, _)| *repair == kind) {
                    repaired.push(kind);
                }
            }
            to_send = again.into_iter().map(|(position, _, _)| position).collect();
        }
        results.into_iter().map(unanswered).collect()
    }

    /// Does what a call's error reply asked for, on the master of the call's slot.
    async fn repair(&self, call: &ScriptCall<'_>, repair: Repair, reason: &str) -> Result<()> {
        match repair {
            Repair::LoadScript => {
                tracing::info!(
                    sha = call.script.hash(),
                    "Redis lost a script (restart, SCRIPT FLUSH or a new master); loading it again"
                );
                self.send_to(call.slot(), &call.script.load_command())
                    .await
                    .and_then(|value| value.extract_error())
                    .map(|_| ())
                    .map_err(|error| self.error("SCRIPT LOAD", &error))
            }
            Repair::LoadLibrary => {
                let Some(library) = call.script.library() else {
                    return Ok(());
                };
                tracing::info!(
                    library = library.name(),
                    "Redis lacks the Functions library (FUNCTION FLUSH, a restart or a new \
                     master); loading it again"
                );
                match self.load_library_at(call.slot(), library).await {
                    Ok(()) => Ok(()),
                    Err(LoadFailure::Unavailable(reason)) => {
                        self.stop_using_functions(&reason);
                        Ok(())
                    }
                    Err(LoadFailure::Failed(error)) => Err(error),
                }
            }
            Repair::UseScripts => {
                self.stop_using_functions(reason);
                Ok(())
            }
        }
    }

    /// Sends `command` to the master of `slot`, or as [`send`](Self::send) does without one.
    async fn send_to(&self, slot: Option<Slot>, command: &Cmd) -> redis::RedisResult<Value> {
        match slot {
            Some(slot) => self.send_at_slot(slot, command).await,
            None => self.send(command).await,
        }
    }
}

/// How often one call may ask for the same repair: a library flushed again between its
/// reload and the call sent again (or a failover meanwhile) is repaired again, a few times.
const REPAIRS_PER_KIND: usize = 4;

/// Whether a call that had the repairs `repaired` done may have `repair` done again.
fn may_repair(repaired: &[Repair], repair: Repair) -> bool {
    repaired.iter().filter(|done| **done == repair).count() < REPAIRS_PER_KIND
}

/// A call's result, or the error of a call that somehow got no reply.
fn unanswered(result: Option<Result<Value>>) -> Result<Value> {
    result.unwrap_or_else(|| {
        Err(Error::Command {
            operation: "EVALSHA",
            transient: false,
            code: None,
            message: "a script call got no reply".to_owned(),
        })
    })
}

/// Why a library could not be loaded.
enum LoadFailure {
    /// Functions cannot be used there (Redis < 7, no permission): the scripts will do.
    Unavailable(String),
    /// Anything else (the library does not compile, the server is gone).
    Failed(Error),
}
