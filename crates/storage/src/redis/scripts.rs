//! The Lua scripts, as one Redis Functions library (built and hashed once per process).
//!
//! Each `lua/<name>.lua` documents its `KEYS`/`ARGV`/reply on top. Shared code lives in five
//! parts: `record.lua` (the record codec), `lease.lua` (the token check), `util.lua` (clock,
//! bulk calls), `flow.lua` (flow keys) and `sweep.lua` (the lease sweep and the executed-set pruning).
//!
//! With Redis Functions (Redis 7+, the default) the parts are the top level of one library,
//! `delayq_<hash of the code>`, run once when it is loaded, and each script body is one
//! function of it (`delayq_<hash>_<name>`), called with `FCALL`: a call runs only its body.
//! Without them (Redis 6, an ACL user without `+fcall +function|load`, or
//! `DELAYQ_REDIS_FUNCTIONS=off`), each script is sent with `EVALSHA` with only the parts it
//! needs in front of it, because Redis then runs a script's top level, function definitions
//! included, on every call (about 0.3 µs per function; caching them in globals is not
//! allowed). The bodies are the same either way.
//!
//! Calls go through `delayq_redis::ScriptCall`: to the master of `KEYS[1]`'s slot; a library
//! or script a server lacks (`FUNCTION FLUSH`, `SCRIPT FLUSH`, a restart, a newly promoted
//! master) is loaded there again by the connection layer, which sends again what did not
//! run, for single calls and pipelines alike. [`connect`](super::RedisStore::connect) loads
//! the library on every master up front, which also checks that the ACL user may.
//! The library's name changes with its code, so two releases run side by side during a
//! rolling upgrade, each with its own functions.

use std::sync::LazyLock;

use delayq_redis::{Library, LibraryBuilder, Script};

/// The first part of the library's name (`delayq_<hash of the code>`).
const LIBRARY_PREFIX: &str = "delayq";

/// The record codec (Lua half).
pub(crate) const RECORD: &str = include_str!("../../lua/record.lua");
/// The lease token check; needs [`RECORD`].
const LEASE: &str = include_str!("../../lua/lease.lua");
/// Clock and bulk-call helpers.
const UTIL: &str = include_str!("../../lua/util.lua");
/// Flow keys: holds, parked tasks and per-key rates.
const FLOW: &str = include_str!("../../lua/flow.lua");
/// The lease sweep and the executed-set pruning; needs [`RECORD`], [`UTIL`] and [`FLOW`].
const SWEEP: &str = include_str!("../../lua/sweep.lua");

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
    /// The Functions library all of them belong to.
    pub library: Library,
}

/// The library and its scripts, built and hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let mut library = LibraryBuilder::new(LIBRARY_PREFIX, &[RECORD, LEASE, UTIL, FLOW, SWEEP]);
    let bodies: [(&str, &[&str], &str); 21] = [
        (
            "schedule",
            &[RECORD, UTIL, FLOW],
            include_str!("../../lua/schedule.lua"),
        ),
        (
            "claim_due",
            &[RECORD, UTIL, FLOW],
            include_str!("../../lua/claim_due.lua"),
        ),
        (
            "ack",
            &[RECORD, LEASE, UTIL, FLOW],
            include_str!("../../lua/ack.lua"),
        ),
        (
            "fail",
            &[RECORD, LEASE, UTIL, FLOW],
            include_str!("../../lua/fail.lua"),
        ),
        (
            "renew",
            &[RECORD, LEASE],
            include_str!("../../lua/renew.lua"),
        ),
        (
            "requeue_expired",
            &[RECORD, UTIL, FLOW, SWEEP],
            include_str!("../../lua/requeue_expired.lua"),
        ),
        (
            "look",
            &[RECORD, UTIL, FLOW, SWEEP],
            include_str!("../../lua/look.lua"),
        ),
        ("cancel", &[FLOW], include_str!("../../lua/cancel.lua")),
        ("get", &[], include_str!("../../lua/get.lua")),
        (
            "prune_done",
            &[RECORD, UTIL, FLOW, SWEEP],
            include_str!("../../lua/prune_done.lua"),
        ),
        ("list_dead", &[], include_str!("../../lua/list_dead.lua")),
        (
            "retry_dead",
            &[RECORD],
            include_str!("../../lua/retry_dead.lua"),
        ),
        (
            "purge_dead",
            &[UTIL],
            include_str!("../../lua/purge_dead.lua"),
        ),
        (
            "recover_claim",
            &[RECORD],
            include_str!("../../lua/recover_claim.lua"),
        ),
        (
            "recurring_swap",
            &[],
            include_str!("../../lua/recurring_swap.lua"),
        ),
        (
            "recurring_due",
            &[],
            include_str!("../../lua/recurring_due.lua"),
        ),
        (
            "recurring_fired",
            &[],
            include_str!("../../lua/recurring_fired.lua"),
        ),
        ("rate_take", &[], include_str!("../../lua/rate_take.lua")),
        (
            "global_slots",
            &[],
            include_str!("../../lua/global_slots.lua"),
        ),
        (
            "drop_partition",
            &[],
            include_str!("../../lua/drop_partition.lua"),
        ),
        (
            "register_queue",
            &[],
            include_str!("../../lua/register_queue.lua"),
        ),
    ];
    for (name, parts, body) in bodies {
        library.function(name, parts, body);
    }
    let (library, scripts) = library.build();
    let mut scripts = scripts.into_iter();
    let mut next = || {
        scripts
            .next()
            .unwrap_or_else(|| unreachable!("one script per function"))
    };
    Scripts {
        schedule: next(),
        claim_due: next(),
        ack: next(),
        fail: next(),
        renew: next(),
        requeue_expired: next(),
        look: next(),
        cancel: next(),
        get: next(),
        prune_done: next(),
        list_dead: next(),
        retry_dead: next(),
        purge_dead: next(),
        recover_claim: next(),
        recurring_swap: next(),
        recurring_due: next(),
        recurring_fired: next(),
        rate_take: next(),
        global_slots: next(),
        drop_partition: next(),
        register_queue: next(),
        library,
    }
});
