//! The offline checker: a pure function from a recorded [`History`] to a [`Verdict`] (counts
//! of every kind and the violations, each with an excerpt of its key's history).
//!
//! # The model
//!
//! The operations on one key are sequential (one producer owns the key and waits for each
//! answer). The producers follow two rules the checker relies on (and checks):
//!
//! - after an operation whose answer was lost (`Unknown`: it may take effect at any later
//!   time, as a request held by a stopped node or a script held by a blackholed connection
//!   does), a key only gets resends of the same id and due, which are idempotent in any order
//!   (guarantee 6); after an unknown cancel, nothing;
//! - a key never gets a due it had before, except as a resend of its last schedule.
//!
//! So a key's history is a sequence of **groups** (the consecutive schedules of one due: a
//! schedule or replace and its resends) and cancels. A group is one task at one due; it fires
//! once, or not at all when the operation after it took it away, or more than once only when
//! a fault hit the node running it. Each fire carries the payload `op-<index>` of the
//! operation it came from, so it belongs to that operation's group.
//!
//! # The rules (guarantees 1–9 as a producer can see them)
//!
//! - **early**: no fire reaches the harness before its due, less
//!   [`Rules::early_tolerance_ms`]. The due was computed by the producer on this machine's
//!   clock, which is the clock Redis `TIME` reads (the claim takes a task only when it is due
//!   on Redis `TIME`, guarantee 9), and the harness stamps a fire after the claim: the
//!   tolerance only covers the millisecond truncation.
//! - **lost**: a group that was acknowledged (`created`/`replaced`), or that a resend found
//!   fired (`duplicate`), fires at least once unless the next operation took it away: a
//!   `replaced` schedule of another due, a `cancelled: true`, or an unknown answer. A next
//!   operation that found no live task (`created`, `cancelled: false`) or a running one
//!   (`state: inflight`) says the group fired.
//! - **superseded**: no group fires at a due later than the answer of a later definite
//!   operation on its key (it cannot have been claimed before that operation, which then
//!   replaced it, cancelled it, or found it gone): "a replaced task fires at its last due
//!   only", "nothing fires after `cancelled: true`".
//! - **after cancel**: no run of a group before a `cancelled: true` begins after the cancel's
//!   answer (`fired_ms`, the node's cluster clock just before the handler, is at most the
//!   answer's time plus [`Rules::node_clock_tolerance_ms`]). A run already under way may
//!   still reach the harness after the answer (counted).
//! - **repeats**: every fire of a group but its last, and every fire of a group a
//!   `cancelled: true` then found pending again (its run was undone), must be explained by a
//!   fault that hit the node that ran it (or every node: a Redis restart, a failover) while
//!   it ran: the fault's interval overlaps the fire's window (see [`Rules`]).
//! - **attribution**: a fire carries the payload of a schedule of its own key and that
//!   schedule's due; never the payload of a schedule answered `duplicate` (which stores
//!   nothing) or refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::history::{Answer, Fault, FaultKind, Fire, History, OpKind};

/// The tolerances of the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A fire received more than this before its due is early.
    pub early_tolerance_ms: u64,
    /// How far a node's `fired_ms` (its estimate of Redis `TIME`) may run ahead of this
    /// machine's clock.
    pub node_clock_tolerance_ms: u64,
    /// A fault explains a repeated fire when it overlaps
    /// `[max(due, min(fired_ms, received) - before), received + after]`.
    pub explain_before_ms: u64,
    /// See [`Rules::explain_before_ms`]: the handler's longest hold plus 200 ms for the ack
    /// (a fault that began after the ack was written did not cut the run short).
    pub explain_after_ms: u64,
    /// A fault of every node explains a run only if the run began (`fired_ms`, the node's
    /// clock) no later than this after the fault ended.
    pub global_fault_tolerance_ms: u64,
}

impl Rules {
    /// The rules for a run: the window after a fire covers the harness's longest hold and
    /// 200 ms for the ack; the window before it, a second (a task claimed just before a node
    /// was stopped or cut off starts its handler when the node is back); a Redis restart or
    /// failover explains only runs begun before it ended (20 ms for the node's clock).
    pub fn for_history(history: &History) -> Self {
        Rules {
            early_tolerance_ms: 1,
            node_clock_tolerance_ms: 100,
            explain_before_ms: 1_000,
            explain_after_ms: history.params.hold_max_ms + 200,
            global_fault_tolerance_ms: 20,
        }
    }
}

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// An acknowledged schedule never fired.
    Lost,
    /// A fire before its due.
    Early,
    /// A run that began after a `cancelled: true`, or fired at a due the cancel took away.
    FiredAfterCancel,
    /// A replaced task fired at its old due.
    ReplacedFiredAtOldDue,
    /// A group fired at a due later than an answer that found it gone or running.
    SupersededFired,
    /// A fire repeated (or undone) without a fault on its node.
    UnexplainedRepeat,
    /// A fire with the payload of a `duplicate` or refused schedule.
    DuplicateFired,
    /// A fire whose payload names no schedule of its key, or whose due is not that
    /// schedule's.
    Misattributed,
    /// An answer the model does not allow (`kept` with `replace`, `duplicate` for a due the
    /// key never had).
    UnexpectedAnswer,
    /// The producers broke their own rules (a different operation after an unknown one).
    HarnessProtocol,
}

impl Rule {
    /// The rule's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Lost => "lost",
            Rule::Early => "early",
            Rule::FiredAfterCancel => "fired after cancelled:true",
            Rule::ReplacedFiredAtOldDue => "replaced task fired at its old due",
            Rule::SupersededFired => "fired at a due a later answer found gone",
            Rule::UnexplainedRepeat => "repeat not explained by a fault",
            Rule::DuplicateFired => "a duplicate or refused schedule fired",
            Rule::Misattributed => "fire of no schedule of its key",
            Rule::UnexpectedAnswer => "unexpected answer",
            Rule::HarnessProtocol => "harness protocol",
        }
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The key's queue.
    pub queue: String,
    /// The key's id.
    pub id: String,
    /// What happened, then the key's history.
    pub detail: String,
}

/// Lateness (received minus due, harness clock) of the first fire of each group whose first
/// schedule was answered (stored at once; every due is at least 150 ms after its schedule
/// was sent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Groups counted (fired, first schedule answered).
    pub count: usize,
    /// Median, ms.
    pub p50: u64,
    /// 90th percentile, ms.
    pub p90: u64,
    /// 99th percentile, ms.
    pub p99: u64,
    /// Largest, ms.
    pub max: u64,
    /// Largest over the groups no fault was near (none active from [`CALM_BEFORE_MS`]
    /// before the due until the fire), ms.
    pub calm_max: u64,
    /// Groups counted in `calm_max`.
    pub calm_count: usize,
    /// Their 99th percentile, ms.
    pub calm_p99: u64,
}

/// Counts of every kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Operations by kind and answer class.
    pub ops: BTreeMap<(&'static str, &'static str), u64>,
    /// All operations.
    pub ops_total: u64,
    /// Faults by kind: count, total and longest duration in ms.
    pub faults: BTreeMap<FaultKind, (u64, u64, u64)>,
    /// Fires received.
    pub fires: u64,
    /// Groups (tasks at one due).
    pub groups: u64,
    /// Groups by what the history says of them: "must fire", "replaced" (by another due),
    /// "cancelled" (`cancelled: true`), "open (an unknown answer)".
    pub fates: BTreeMap<&'static str, u64>,
    /// Groups that fired at least once.
    pub fired_groups: u64,
    /// Groups that had to fire and did not.
    pub lost: u64,
    /// Fires before their due.
    pub early: u64,
    /// Repeated fires explained by a fault, by the fault's kind.
    pub repeats: BTreeMap<FaultKind, u64>,
    /// Fires undone (a later `cancelled: true` found the task pending again), explained by a
    /// fault, by its kind.
    pub undone: BTreeMap<FaultKind, u64>,
    /// Fires repeated or undone with no fault to explain them.
    pub unexplained: u64,
    /// Runs under way at a `cancelled: true` whose fire reached the harness after the answer.
    pub inflight_across_cancel: u64,
    /// Groups replaced by another due that had fired (the replace came after their due: the
    /// run went on beside the new schedule).
    pub raced_replaces: u64,
    /// `resend` answered `duplicate` (dedup held).
    pub duplicates: u64,
    /// Lateness.
    pub lateness: Lateness,
    /// Earliest fire relative to its due (received minus due; negative is early), ms.
    pub earliest_ms: i64,
    /// How far a node's `fired_ms` ran ahead of the harness's receive time at most, ms.
    pub node_clock_ahead_ms: i64,
    /// The spread of (wall - monotonic) over every stamp: a wall clock step shows here, ms.
    pub clock_step_ms: u64,
    /// Node processes.
    pub node_lives: u64,
}

/// The checker's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Counts.
    pub counts: Counts,
    /// Violations, in key order.
    pub violations: Vec<Violation>,
}

/// One group: consecutive schedules of one key with one due.
#[derive(Debug)]
struct Group {
    due_ms: u64,
    ops: Vec<usize>,
    fires: Vec<usize>,
}

/// A key's history: groups and cancels in order.
#[derive(Debug)]
enum Item {
    Group(Group),
    Cancel(usize),
}

type Key = (String, String);

/// Checks `history` against `rules`.
pub fn check(history: &History, rules: &Rules) -> Verdict {
    let mut verdict = Verdict::default();
    count_ops_and_faults(history, &mut verdict.counts);
    let mut timelines = timelines(history, &mut verdict);
    attribute_fires(history, rules, &mut timelines, &mut verdict);
    for (key, items) in &timelines {
        check_key(history, rules, key, items, &mut verdict);
    }
    verdict.counts.lateness = lateness(history, &timelines);
    verdict.counts.clock_step_ms = clock_step(history);
    verdict
}

fn count_ops_and_faults(history: &History, counts: &mut Counts) {
    for op in &history.ops {
        *counts
            .ops
            .entry((op.kind.name(), op.answer.class()))
            .or_default() += 1;
        if op.kind == OpKind::Resend && op.answer.class() == "duplicate" {
            counts.duplicates += 1;
        }
    }
    counts.ops_total = history.ops.len() as u64;
    for fault in &history.faults {
        let entry = counts.faults.entry(fault.kind).or_default();
        let duration = fault.end.wall_ms.saturating_sub(fault.start.wall_ms);
        entry.0 += 1;
        entry.1 += duration;
        entry.2 = entry.2.max(duration);
    }
    counts.fires = history.fires.len() as u64;
    counts.node_lives = history.nodes.len() as u64;
}

/// Each key's operations in order (their indices are taken at invocation, so they order
/// one producer's operations), cut into groups and cancels; refused operations took no
/// effect and are left out.
fn timelines(history: &History, verdict: &mut Verdict) -> BTreeMap<Key, Vec<Item>> {
    let mut by_key: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (at, op) in history.ops.iter().enumerate() {
        by_key
            .entry((op.queue.clone(), op.id.clone()))
            .or_default()
            .push(at);
    }
    let mut timelines = BTreeMap::new();
    for (key, mut ops) in by_key {
        ops.sort_by_key(|&at| history.ops[at].index);
        let mut items: Vec<Item> = Vec::new();
        let mut unknown_due: Option<Option<u64>> = None;
        for at in ops {
            let op = &history.ops[at];
            if let Some(frozen) = unknown_due {
                if op.due_ms.is_none() || frozen != op.due_ms {
                    violation(
                        verdict,
                        Rule::HarnessProtocol,
                        &key,
                        format!(
                            "op {} follows an unknown answer with another due or a cancel",
                            op.index
                        ),
                        history,
                    );
                }
            }
            if matches!(op.answer, Answer::Unknown { .. }) {
                unknown_due = Some(op.due_ms);
            }
            if matches!(op.answer, Answer::Refused { .. }) {
                continue;
            }
            match op.due_ms {
                None => items.push(Item::Cancel(at)),
                Some(due_ms) => match items.last_mut() {
                    Some(Item::Group(group)) if group.due_ms == due_ms => group.ops.push(at),
                    _ => items.push(Item::Group(Group {
                        due_ms,
                        ops: vec![at],
                        fires: Vec::new(),
                    })),
                },
            }
        }
        timelines.insert(key, items);
    }
    timelines
}

/// Puts each fire into the group of the operation its payload names; checks earliness and
/// attribution.
fn attribute_fires(
    history: &History,
    rules: &Rules,
    timelines: &mut BTreeMap<Key, Vec<Item>>,
    verdict: &mut Verdict,
) {
    let position: BTreeMap<u64, usize> = history
        .ops
        .iter()
        .enumerate()
        .map(|(at, op)| (op.index, at))
        .collect();
    verdict.counts.earliest_ms = i64::MAX;
    verdict.counts.node_clock_ahead_ms = i64::MIN;
    for (fire_at, fire) in history.fires.iter().enumerate() {
        let key = (fire.queue.clone(), fire.id.clone());
        let received = fire.received.wall_ms as i64;
        verdict.counts.earliest_ms = verdict
            .counts
            .earliest_ms
            .min(received - fire.due_ms as i64);
        verdict.counts.node_clock_ahead_ms = verdict
            .counts
            .node_clock_ahead_ms
            .max(fire.fired_ms as i64 - received);
        if fire.received.wall_ms + rules.early_tolerance_ms < fire.due_ms {
            verdict.counts.early += 1;
            let detail = format!(
                "received {} ms before its due: {}",
                fire.due_ms - fire.received.wall_ms,
                describe_fire(history, fire)
            );
            violation(verdict, Rule::Early, &key, detail, history);
        }
        let op_at = fire
            .op_index()
            .and_then(|index| position.get(&index).copied());
        let Some(op_at) = op_at.filter(|&at| {
            let op = &history.ops[at];
            op.queue == fire.queue && op.id == fire.id && op.due_ms.is_some()
        }) else {
            let detail = format!(
                "payload {:?} names no schedule of this key: {}",
                fire.payload,
                describe_fire(history, fire)
            );
            violation(verdict, Rule::Misattributed, &key, detail, history);
            continue;
        };
        let op = &history.ops[op_at];
        if op.due_ms != Some(fire.due_ms) {
            let detail = format!(
                "fired at due {} but op {} scheduled {:?}: {}",
                fire.due_ms,
                op.index,
                op.due_ms,
                describe_fire(history, fire)
            );
            violation(verdict, Rule::Misattributed, &key, detail, history);
        }
        let stored_nothing = matches!(
            op.answer,
            Answer::Scheduled {
                duplicate: true,
                ..
            } | Answer::Refused { .. }
        );
        if stored_nothing {
            let detail = format!(
                "op {} was answered {}, yet its payload fired: {}",
                op.index,
                op.answer.class(),
                describe_fire(history, fire)
            );
            violation(verdict, Rule::DuplicateFired, &key, detail, history);
            continue;
        }
        let group = timelines.get_mut(&key).and_then(|items| {
            items.iter_mut().find_map(|item| match item {
                Item::Group(group) if group.ops.contains(&op_at) => Some(group),
                _ => None,
            })
        });
        if let Some(group) = group {
            group.fires.push(fire_at);
        }
    }
    if history.fires.is_empty() {
        verdict.counts.earliest_ms = 0;
        verdict.counts.node_clock_ahead_ms = 0;
    }
    for items in timelines.values_mut() {
        for item in items {
            if let Item::Group(group) = item {
                group.fires.sort_by_key(|&at| {
                    let fire = &history.fires[at];
                    (fire.received.wall_ms, fire.received.mono_ms)
                });
            }
        }
    }
}

/// What the operation after a group says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Nothing after it, or an answer that found it fired, running or gone: it fired.
    Fired,
    /// A schedule of another due replaced it: it fired only if it was already running.
    Replaced,
    /// `cancelled: true` found it pending (or waiting for a retry): it must not have run
    /// to the end; any fire of it was undone.
    Cancelled,
    /// The next operation's answer is unknown: it may have fired.
    Open,
}

fn fate(history: &History, next: Option<&Item>) -> Fate {
    let op = match next {
        None => return Fate::Fired,
        Some(Item::Cancel(at)) => &history.ops[*at],
        Some(Item::Group(group)) => &history.ops[group.ops[0]],
    };
    match op.answer {
        Answer::Cancelled {
            cancelled: true, ..
        } => Fate::Cancelled,
        Answer::Cancelled { .. } => Fate::Fired,
        Answer::Scheduled {
            replaced: false,
            duplicate: false,
            kept: false,
            ..
        } => Fate::Fired,
        Answer::Scheduled { replaced: true, .. } => Fate::Replaced,
        _ => Fate::Open,
    }
}

fn check_key(history: &History, rules: &Rules, key: &Key, items: &[Item], verdict: &mut Verdict) {
    for (position, item) in items.iter().enumerate() {
        match item {
            Item::Cancel(at) => check_cancel(history, rules, key, &items[..position], *at, verdict),
            Item::Group(group) => {
                check_group(history, rules, key, group, &items[position + 1..], verdict)
            }
        }
    }
}

fn check_group(
    history: &History,
    rules: &Rules,
    key: &Key,
    group: &Group,
    after: &[Item],
    verdict: &mut Verdict,
) {
    let answers: Vec<&Answer> = group
        .ops
        .iter()
        .map(|&at| &history.ops[at].answer)
        .collect();
    let applied = answers.iter().any(|answer| {
        matches!(
            answer,
            Answer::Scheduled {
                duplicate: false,
                kept: false,
                ..
            }
        )
    });
    let duplicate = answers.iter().any(|answer| {
        matches!(
            answer,
            Answer::Scheduled {
                duplicate: true,
                ..
            }
        )
    });
    let kept = answers
        .iter()
        .any(|answer| matches!(answer, Answer::Scheduled { kept: true, .. }));
    let fate = fate(history, after.first());
    let fired = !group.fires.is_empty();
    let must_fire = duplicate || (applied && fate == Fate::Fired);
    let counts = &mut verdict.counts;
    counts.groups += 1;
    if fired {
        counts.fired_groups += 1;
    }
    let class = if must_fire {
        "must fire"
    } else if !applied || fate == Fate::Open {
        "open (an unknown answer)"
    } else if fate == Fate::Replaced {
        "replaced"
    } else {
        "cancelled"
    };
    *counts.fates.entry(class).or_default() += 1;
    if kept {
        let detail = format!("a replace-mode schedule at due {} was kept", group.due_ms);
        violation(verdict, Rule::UnexpectedAnswer, key, detail, history);
    }
    if must_fire && !fired {
        verdict.counts.lost += 1;
        let why = if duplicate && !(applied && fate == Fate::Fired) {
            "a resend was answered duplicate, yet nothing fired"
        } else {
            "acknowledged, not taken away by the next operation, never fired"
        };
        let detail = format!("due {}: {why}", group.due_ms);
        violation(verdict, Rule::Lost, key, detail, history);
    }
    if fired && fate == Fate::Replaced {
        verdict.counts.raced_replaces += 1;
    }
    check_superseded(history, rules, key, group, after, verdict);
    check_repeats(history, rules, key, group, fate, verdict);
}

/// No fire of a group at a due later than the answer of a later definite operation.
fn check_superseded(
    history: &History,
    rules: &Rules,
    key: &Key,
    group: &Group,
    after: &[Item],
    verdict: &mut Verdict,
) {
    if group.fires.is_empty() {
        return;
    }
    let later = after.iter().flat_map(|item| match item {
        Item::Cancel(at) => vec![*at],
        Item::Group(group) => group.ops.clone(),
    });
    for at in later {
        let op = &history.ops[at];
        if !op.answer.is_definite()
            || op.completed.wall_ms + rules.early_tolerance_ms >= group.due_ms
        {
            continue;
        }
        let rule = match op.answer {
            Answer::Scheduled { replaced: true, .. } => Rule::ReplacedFiredAtOldDue,
            Answer::Cancelled {
                cancelled: true, ..
            } => Rule::FiredAfterCancel,
            _ => Rule::SupersededFired,
        };
        let detail = format!(
            "due {} fired {} time(s), but op {} ({} {}) answered at {}, before that due",
            group.due_ms,
            group.fires.len(),
            op.index,
            op.kind.name(),
            op.answer.class(),
            op.completed.wall_ms
        );
        violation(verdict, rule, key, detail, history);
        return;
    }
}

/// No run of a group before a `cancelled: true` began after its answer.
fn check_cancel(
    history: &History,
    rules: &Rules,
    key: &Key,
    before: &[Item],
    at: usize,
    verdict: &mut Verdict,
) {
    let cancel = &history.ops[at];
    if !matches!(
        cancel.answer,
        Answer::Cancelled {
            cancelled: true,
            ..
        }
    ) {
        return;
    }
    let answered = cancel.completed.wall_ms;
    for item in before {
        let Item::Group(group) = item else { continue };
        for &fire_at in &group.fires {
            let fire = &history.fires[fire_at];
            if fire.fired_ms > answered + rules.node_clock_tolerance_ms {
                let detail = format!(
                    "op {} answered cancelled:true at {answered}; a run began at {}: {}",
                    cancel.index,
                    fire.fired_ms,
                    describe_fire(history, fire)
                );
                violation(verdict, Rule::FiredAfterCancel, key, detail, history);
            } else if fire.received.wall_ms > answered {
                verdict.counts.inflight_across_cancel += 1;
            }
        }
    }
}

/// A group fires once: of its fires at most one may be unexplained, the others (all of
/// them when a cancel later found the task pending again) must have been cut short by a
/// fault on their node. Which of the fires was the one that counted is not known (a stopped
/// node's fire can reach the harness after the one that replaced it), only how many lack a
/// fault.
fn check_repeats(
    history: &History,
    rules: &Rules,
    key: &Key,
    group: &Group,
    fate: Fate,
    verdict: &mut Verdict,
) {
    let (allowed, extra) = match fate {
        Fate::Cancelled => (0, group.fires.len()),
        _ => (1, group.fires.len().saturating_sub(1)),
    };
    if extra == 0 {
        return;
    }
    let mut why: Option<FaultKind> = None;
    let mut unexplained = Vec::new();
    for &fire_at in &group.fires {
        let fire = &history.fires[fire_at];
        match explaining_fault(history, rules, fire) {
            Some(fault) => {
                why.get_or_insert(fault.kind);
            }
            None => unexplained.push(fire),
        }
    }
    if let Some(kind) = why {
        let counts = if fate == Fate::Cancelled {
            &mut verdict.counts.undone
        } else {
            &mut verdict.counts.repeats
        };
        *counts.entry(kind).or_default() +=
            (extra.min(group.fires.len() - unexplained.len())) as u64;
    }
    if unexplained.len() > allowed {
        verdict.counts.unexplained += (unexplained.len() - allowed) as u64;
        let what = if fate == Fate::Cancelled {
            "fired, then a cancel found it pending again,"
        } else {
            "fired more than once,"
        };
        let fires: Vec<String> = unexplained
            .iter()
            .map(|fire| describe_fire(history, fire))
            .collect();
        let detail = format!(
            "due {} {what} and no fault hit the node of these fires around their runs: {}",
            group.due_ms,
            fires.join("; ")
        );
        violation(verdict, Rule::UnexplainedRepeat, key, detail, history);
    }
}

/// The fault that explains why `fire` was not the last: on its node, overlapping its window
/// (which never begins before the fire's due), or on every node (a Redis restart, a
/// failover), overlapping the window and ended after the run began.
pub fn explaining_fault<'a>(history: &'a History, rules: &Rules, fire: &Fire) -> Option<&'a Fault> {
    let began = fire.fired_ms.min(fire.received.wall_ms);
    // The run's claim came at its due at the earliest (Redis `TIME`, this machine's clock):
    // a fault that ended before the due did not hit it.
    let from = began
        .saturating_sub(rules.explain_before_ms)
        .max(fire.due_ms);
    let until = fire.received.wall_ms + rules.explain_after_ms;
    history.faults.iter().find(|fault| {
        let overlaps = fault.start.wall_ms <= until && fault.end.wall_ms >= from;
        match &fault.node {
            Some(node) => *node == fire.node && overlaps,
            // A fault of every node (Redis itself) hit only runs begun before it ended: a
            // run begun once Redis was back had a fresh claim and lease.
            None => overlaps && began <= fault.end.wall_ms + rules.node_clock_tolerance_ms,
        }
    })
}

/// A fire counts as away from faults when none was active from this long before its due
/// until the fire (a fault's after-effects, such as a node's partitions moving back, last
/// about a heartbeat TTL).
pub const CALM_BEFORE_MS: u64 = 1_000;

fn lateness(history: &History, timelines: &BTreeMap<Key, Vec<Item>>) -> Lateness {
    let mut all = Vec::new();
    let mut calm = Vec::new();
    for items in timelines.values() {
        for item in items {
            let Item::Group(group) = item else { continue };
            let Some(&first) = group.fires.first() else {
                continue;
            };
            // A task whose first schedule's answer was lost may have been stored only by a
            // resend long after its due: its lateness says nothing about firing.
            let stored_at_once = matches!(
                history.ops[group.ops[0]].answer,
                Answer::Scheduled {
                    duplicate: false,
                    ..
                }
            );
            if !stored_at_once {
                continue;
            }
            let fire = &history.fires[first];
            let late = fire.received.wall_ms.saturating_sub(group.due_ms);
            all.push(late);
            let from = group.due_ms.saturating_sub(CALM_BEFORE_MS);
            let near_fault = history.faults.iter().any(|fault| {
                fault.start.wall_ms <= fire.received.wall_ms && fault.end.wall_ms >= from
            });
            if !near_fault {
                calm.push(late);
            }
        }
    }
    all.sort_unstable();
    calm.sort_unstable();
    let at = |values: &[u64], q: f64| {
        if values.is_empty() {
            0
        } else {
            values[((values.len() - 1) as f64 * q).round() as usize]
        }
    };
    Lateness {
        count: all.len(),
        p50: at(&all, 0.5),
        p90: at(&all, 0.9),
        p99: at(&all, 0.99),
        max: at(&all, 1.0),
        calm_max: at(&calm, 1.0),
        calm_count: calm.len(),
        calm_p99: at(&calm, 0.99),
    }
}

fn clock_step(history: &History) -> u64 {
    let stamps = history
        .ops
        .iter()
        .flat_map(|op| [op.invoked, op.completed])
        .chain(history.fires.iter().map(|fire| fire.received))
        .chain(
            history
                .faults
                .iter()
                .flat_map(|fault| [fault.start, fault.end]),
        )
        .chain([history.started, history.ended]);
    let offsets: Vec<i64> = stamps
        .map(|stamp| stamp.wall_ms as i64 - stamp.mono_ms as i64)
        .collect();
    match (offsets.iter().min(), offsets.iter().max()) {
        (Some(min), Some(max)) => (max - min) as u64,
        _ => 0,
    }
}

fn violation(verdict: &mut Verdict, rule: Rule, key: &Key, what: String, history: &History) {
    let mut detail = what;
    detail.push('\n');
    detail.push_str(&excerpt(history, key));
    verdict.violations.push(Violation {
        rule,
        queue: key.0.clone(),
        id: key.1.clone(),
        detail,
    });
}

fn describe_fire(history: &History, fire: &Fire) -> String {
    let relative = |wall: u64| wall as i64 - history.started.wall_ms as i64;
    format!(
        "fire {} due {} recv {} (+{} ms, t={}) fired_ms {} attempt {} gen {} node {}",
        fire.payload,
        fire.due_ms,
        fire.received.wall_ms,
        fire.received.wall_ms as i64 - fire.due_ms as i64,
        relative(fire.received.wall_ms),
        fire.fired_ms,
        fire.attempt,
        fire.generation,
        short(&fire.node)
    )
}

fn short(node: &str) -> &str {
    &node[..node.len().min(8)]
}

/// The key's operations, fires and the faults of their time, one line each, in time order
/// (at most 40 lines).
pub fn excerpt(history: &History, key: &Key) -> String {
    let mut lines: Vec<(u64, String)> = Vec::new();
    let t0 = history.started.wall_ms as i64;
    for op in history
        .ops
        .iter()
        .filter(|op| op.queue == key.0 && op.id == key.1)
    {
        let due = op
            .due_ms
            .map(|due| format!(" due {due} (t={})", due as i64 - t0))
            .unwrap_or_default();
        lines.push((
            op.invoked.wall_ms,
            format!(
                "  t={}..{} op {} {}{due} via slot {} -> {:?}",
                op.invoked.wall_ms as i64 - t0,
                op.completed.wall_ms as i64 - t0,
                op.index,
                op.kind.name(),
                op.slot,
                op.answer
            ),
        ));
    }
    let mut span = (u64::MAX, 0);
    for fire in history
        .fires
        .iter()
        .filter(|fire| fire.queue == key.0 && fire.id == key.1)
    {
        span = (span.0.min(fire.fired_ms), span.1.max(fire.received.wall_ms));
        lines.push((
            fire.received.wall_ms,
            format!("  {}", describe_fire(history, fire)),
        ));
    }
    for op in history
        .ops
        .iter()
        .filter(|op| op.queue == key.0 && op.id == key.1)
    {
        span = (
            span.0.min(op.invoked.wall_ms),
            span.1.max(op.completed.wall_ms),
        );
    }
    for fault in &history.faults {
        if fault.end.wall_ms + 3_000 >= span.0 && fault.start.wall_ms <= span.1 + 3_000 {
            lines.push((
                fault.start.wall_ms,
                format!(
                    "  t={}..{} fault {} on {}",
                    fault.start.wall_ms as i64 - t0,
                    fault.end.wall_ms as i64 - t0,
                    fault.kind.name(),
                    fault.node.as_deref().map_or("every node", short)
                ),
            ));
        }
    }
    lines.sort_by_key(|(at, _)| *at);
    let mut text = format!("  history of {}/{}:\n", key.0, key.1);
    for (_, line) in lines.iter().take(40) {
        let _ = writeln!(text, "{line}");
    }
    text
}
