//! The membership scripts (`lua/*.lua`, each with its KEYS/ARGV contract on top), compiled
//! once with the shared prelude prepended. They run on the master of the `{cluster}` slot
//! (their `KEYS[1]`), and are loaded again wherever a master lost them.

use std::sync::LazyLock;

use delayq_redis::Script;

const PRELUDE: &str = include_str!("lua/prelude.lua");

fn with_prelude(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// Registers or refreshes this node and removes dead members (also used to join).
pub(crate) static HEARTBEAT: LazyLock<Script> =
    LazyLock::new(|| with_prelude(include_str!("lua/heartbeat.lua")));

/// Removes this node at once.
pub(crate) static LEAVE: LazyLock<Script> =
    LazyLock::new(|| with_prelude(include_str!("lua/leave.lua")));

/// Reads epoch, registry and time together; writes nothing.
pub(crate) static SNAPSHOT: LazyLock<Script> =
    LazyLock::new(|| with_prelude(include_str!("lua/snapshot.lua")));
