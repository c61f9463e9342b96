//! The Lua scripts, hashed once per process and invoked by SHA.
//!
//! Each `lua/<name>.lua` documents its `KEYS`/`ARGV`/reply on top. Shared code lives in four
//! parts put in front of the scripts that use them: `record.lua` (the record codec),
//! `lease.lua` (the token check), `util.lua` (clock, bulk calls) and `sweep.lua` (the lease
//! sweep and the executed-set pruning). Each script gets only the
//! parts it needs, because Redis runs a script's top level, function definitions included, on
//! every call (about 0.3 µs per function; caching them in globals is not allowed).
//! Calls go through `delayq_redis::ScriptCall`: to the master of `KEYS[1]`'s slot, and on
//! `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a newly promoted master) the connection layer loads
//! the script there and sends again what did not run, for single calls and pipelines alike.
//! [`connect`](super::RedisStore::connect) loads them all up front, which also checks that
//! the ACL user may run them.

use std::sync::LazyLock;

use delayq_redis::Script;

/// The record codec (Lua half).
pub(crate) const RECORD: &str = include_str!("../../lua/record.lua");
/// The lease token check; needs [`RECORD`].
const LEASE: &str = include_str!("../../lua/lease.lua");
/// Clock and bulk-call helpers.
const UTIL: &str = include_str!("../../lua/util.lua");
/// The lease sweep and the executed-set pruning; needs [`RECORD`] and [`UTIL`].
const SWEEP: &str = include_str!("../../lua/sweep.lua");

fn script(parts: &[&str], body: &str) -> Script {
    let mut code = parts.join("\n");
    code.push('\n');
    code.push_str(body);
    Script::new(&code)
}

/// Every script of the Redis backend.
pub(crate) struct Scripts {
    pub schedule: Script,
    pub claim_due: Script,
    pub ack: Script,
    pub fail: Script,
    pub renew: Script,
    pub requeue_expired: Script,
    pub look: Script,
    pub cancel: Script,
    pub get: Script,
    pub prune_done: Script,
    pub list_dead: Script,
    pub retry_dead: Script,
    pub purge_dead: Script,
    pub recover_claim: Script,
    pub recurring_swap: Script,
    pub recurring_due: Script,
    pub recurring_fired: Script,
    pub rate_take: Script,
    pub global_slots: Script,
    pub drop_partition: Script,
    pub register_queue: Script,
}

impl Scripts {
    /// All of them, for preloading.
    pub(crate) fn all(&self) -> [&Script; 21] {
        [
            &self.schedule,
            &self.claim_due,
            &self.ack,
            &self.fail,
            &self.renew,
            &self.requeue_expired,
            &self.look,
            &self.cancel,
            &self.get,
            &self.prune_done,
            &self.list_dead,
            &self.retry_dead,
            &self.purge_dead,
            &self.recover_claim,
            &self.recurring_swap,
            &self.recurring_due,
            &self.recurring_fired,
            &self.rate_take,
            &self.global_slots,
            &self.drop_partition,
            &self.register_queue,
        ]
    }
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    schedule: script(&[RECORD, UTIL], include_str!("../../lua/schedule.lua")),
    claim_due: script(&[RECORD, UTIL], include_str!("../../lua/claim_due.lua")),
    ack: script(&[RECORD, LEASE, UTIL], include_str!("../../lua/ack.lua")),
    fail: script(&[RECORD, LEASE, UTIL], include_str!("../../lua/fail.lua")),
    renew: script(&[RECORD, LEASE], include_str!("../../lua/renew.lua")),
    requeue_expired: script(
        &[RECORD, UTIL, SWEEP],
        include_str!("../../lua/requeue_expired.lua"),
    ),
    look: script(&[RECORD, UTIL, SWEEP], include_str!("../../lua/look.lua")),
    cancel: script(&[], include_str!("../../lua/cancel.lua")),
    get: script(&[], include_str!("../../lua/get.lua")),
    prune_done: script(
        &[RECORD, UTIL, SWEEP],
        include_str!("../../lua/prune_done.lua"),
    ),
    list_dead: script(&[], include_str!("../../lua/list_dead.lua")),
    retry_dead: script(&[RECORD], include_str!("../../lua/retry_dead.lua")),
    purge_dead: script(&[UTIL], include_str!("../../lua/purge_dead.lua")),
    recover_claim: script(&[RECORD], include_str!("../../lua/recover_claim.lua")),
    recurring_swap: script(&[], include_str!("../../lua/recurring_swap.lua")),
    recurring_due: script(&[], include_str!("../../lua/recurring_due.lua")),
    recurring_fired: script(&[], include_str!("../../lua/recurring_fired.lua")),
    rate_take: script(&[], include_str!("../../lua/rate_take.lua")),
    global_slots: script(&[], include_str!("../../lua/global_slots.lua")),
    drop_partition: script(&[], include_str!("../../lua/drop_partition.lua")),
    register_queue: script(&[], include_str!("../../lua/register_queue.lua")),
});
