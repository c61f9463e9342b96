//! The Lua scripts, loaded once per process and invoked by SHA.
//!
//! Each `lua/<name>.lua` documents its `KEYS`/`ARGV`/reply on top. `lua/record.lua` (the
//! record codec and the lease check) is put in front of each, so the codec lives in one file.
//! Single calls go through [`redis::Script`] (EVALSHA, and on NOSCRIPT a SCRIPT LOAD and one
//! more try); pipelined calls cannot rely on that, so [`connect`](super::RedisStore::connect)
//! loads every script up front and `schedule_many` reloads on NOSCRIPT (after a Redis restart
//! or `SCRIPT FLUSH`) and resends what did not run.

use std::sync::LazyLock;

use redis::Script;

/// The shared prelude: the record codec, the lease check, helpers.
pub(crate) const PRELUDE: &str = include_str!("../../lua/record.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// Every script of the Redis backend.
pub(crate) struct Scripts {
    pub schedule: Script,
    pub claim_due: Script,
    pub ack: Script,
    pub fail: Script,
    pub renew: Script,
    pub requeue_expired: Script,
    pub cancel: Script,
    pub get: Script,
    pub prune_done: Script,
    pub list_dead: Script,
    pub retry_dead: Script,
    pub purge_dead: Script,
}

impl Scripts {
    /// All of them, for preloading.
    pub(crate) fn all(&self) -> [&Script; 12] {
        [
            &self.schedule,
            &self.claim_due,
            &self.ack,
            &self.fail,
            &self.renew,
            &self.requeue_expired,
            &self.cancel,
            &self.get,
            &self.prune_done,
            &self.list_dead,
            &self.retry_dead,
            &self.purge_dead,
        ]
    }
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    schedule: script(include_str!("../../lua/schedule.lua")),
    claim_due: script(include_str!("../../lua/claim_due.lua")),
    ack: script(include_str!("../../lua/ack.lua")),
    fail: script(include_str!("../../lua/fail.lua")),
    renew: script(include_str!("../../lua/renew.lua")),
    requeue_expired: script(include_str!("../../lua/requeue_expired.lua")),
    cancel: script(include_str!("../../lua/cancel.lua")),
    get: script(include_str!("../../lua/get.lua")),
    prune_done: script(include_str!("../../lua/prune_done.lua")),
    list_dead: script(include_str!("../../lua/list_dead.lua")),
    retry_dead: script(include_str!("../../lua/retry_dead.lua")),
    purge_dead: script(include_str!("../../lua/purge_dead.lua")),
});
