//! Lua scripts by SHA, or the Redis Functions they belong to, routed by `KEYS[1]`'s slot and
//! repaired where a server lost them.
//!
//! A [`Script`] made by a [`LibraryBuilder`](crate::LibraryBuilder) is called with `FCALL`
//! while the connection uses Functions, and with `EVALSHA` otherwise (see
//! [`crate::ConnectOptions::functions`]); any other script always with `EVALSHA`. A call that
//! did not run because something was missing is repaired and sent again, only that call (it
//! did nothing, so this never applies a call twice):
//! - `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a replica promoted to master): the script is
//!   loaded on the master of that call's slot;
//! - `ERR Function not found` (`FUNCTION FLUSH`, a new master): the library is loaded there;
//! - `unknown command 'FCALL'` (Redis < 7) or `NOPERM` on `fcall`: the connection calls the
//!   `EVALSHA` twins from then on.

use std::sync::Arc;

use redis::cluster_routing::Slot;
use redis::{Cmd, ToRedisArgs};

use crate::library::Library;

/// A Lua script: its source and SHA1, and the library function it stands for, if any.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Script {
    code: Arc<str>,
    inner: redis::Script,
    function: Option<Arc<Function>>,
}

/// The library function a script stands for.
#[derive(Debug)]
pub(crate) struct Function {
    pub(crate) name: String,
    pub(crate) library: Library,
}

impl Script {
    /// A script with `code` (its SHA1 is computed here), always called with `EVALSHA`.
    pub fn new(code: &str) -> Self {
        Script {
            code: Arc::from(code),
            inner: redis::Script::new(code),
            function: None,
        }
    }

    /// The fallback `code` of the function `name` of `library`.
    pub(crate) fn in_library(code: &str, name: String, library: Library) -> Self {
        Script {
            function: Some(Arc::new(Function { name, library })),
            ..Script::new(code)
        }
    }

    /// The script's SHA1, as `EVALSHA` wants it.
    pub fn hash(&self) -> &str {
        self.inner.get_hash()
    }

    /// The source of the `EVALSHA` script.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The name of the library function this script stands for (`FCALL`), if any.
    pub fn function(&self) -> Option<&str> {
        self.function
            .as_deref()
            .map(|function| function.name.as_str())
    }

    /// The library this script's function belongs to, if any.
    pub fn library(&self) -> Option<&Library> {
        self.function.as_deref().map(|function| &function.library)
    }

    /// The same script as a redis-rs [`redis::Script`].
    pub fn as_redis(&self) -> &redis::Script {
        &self.inner
    }

    pub(crate) fn load_command(&self) -> Cmd {
        let mut command = redis::cmd("SCRIPT");
        command.arg("LOAD").arg(self.code());
        command
    }
}

/// One call of a [`Script`]: its `KEYS` and `ARGV`. On a cluster every key must share one
/// slot; the call is sent to the master of `KEYS[1]`'s slot.
#[derive(Debug, Clone)]
pub struct ScriptCall<'a> {
    pub(crate) script: &'a Script,
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
        self.command_as(Way::Script)
    }

    /// The call as `FCALL` (for a library's script) or `EVALSHA`.
    pub(crate) fn command_as(&self, way: Way) -> Cmd {
        let mut command = match (way, self.script.function()) {
            (Way::Function, Some(name)) => {
                let mut command = redis::cmd("FCALL");
                command.arg(name);
                command
            }
            _ => {
                let mut command = redis::cmd("EVALSHA");
                command.arg(self.script.hash());
                command
            }
        };
        command.arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        command
    }

    /// How this call goes out on a connection that uses Functions or not.
    pub(crate) fn way(&self, functions: bool) -> Way {
        if functions && self.script.function.is_some() {
            Way::Function
        } else {
            Way::Script
        }
    }
}

/// How a call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// `FCALL` of the library function.
    Function,
    /// `EVALSHA` of the script.
    Script,
}

impl Way {
    /// The command's name, for errors.
    pub(crate) fn operation(self) -> &'static str {
        match self {
            Way::Function => "FCALL",
            Way::Script => "EVALSHA",
        }
    }
}
