//! The checker on hand-made histories: each rule is broken once and caught, and the
//! histories a correct cluster produces under faults pass.

use super::checker::{check, Rule, Rules, Verdict};
use super::history::{
    Answer, Fault, FaultKind, Fire, History, NodeLife, Op, OpKind, RunParams, Stamp,
};

/// The run's start on the wall clock.
const T0: u64 = 1_700_000_000_000;
const QUEUE: &str = "q";

fn stamp(offset: u64) -> Stamp {
    Stamp {
        wall_ms: T0 + offset,
        mono_ms: offset,
    }
}

fn created(due: u64) -> Answer {
    Answer::Scheduled {
        due_ms: T0 + due,
        replaced: false,
        duplicate: false,
        kept: false,
    }
}

fn replaced(due: u64) -> Answer {
    Answer::Scheduled {
        due_ms: T0 + due,
        replaced: true,
        duplicate: false,
        kept: false,
    }
}

fn duplicate(due: u64) -> Answer {
    Answer::Scheduled {
        due_ms: T0 + due,
        replaced: false,
        duplicate: true,
        kept: false,
    }
}

fn cancelled(yes: bool, inflight: bool) -> Answer {
    Answer::Cancelled {
        cancelled: yes,
        inflight,
    }
}

fn unknown() -> Answer {
    Answer::Unknown {
        error: "operation timed out".to_owned(),
    }
}

/// Builds a history; times are offsets from [`T0`] in ms.
struct Build {
    history: History,
    next: u64,
}

impl Build {
    fn new() -> Self {
        Build {
            history: History {
                params: RunParams {
                    secs: 10,
                    nodes: 2,
                    producers: 1,
                    rate: 1,
                    sentinel: false,
                    seed: 0,
                    hold_max_ms: 300,
                    lease_ms: 2_000,
                    ttl_ms: 1_000,
                },
                started: stamp(0),
                load_ended: stamp(60_000),
                ended: stamp(70_000),
                ops: Vec::new(),
                fires: Vec::new(),
                faults: Vec::new(),
                nodes: ["a", "b"]
                    .iter()
                    .enumerate()
                    .map(|(slot, node)| NodeLife {
                        slot,
                        node: (*node).to_owned(),
                        started: stamp(0),
                    })
                    .collect(),
            },
            next: 0,
        }
    }

    /// An operation on `id` sent at `at`, answered 10 ms later; returns its index.
    fn op(&mut self, id: &str, kind: OpKind, due: Option<u64>, at: u64, answer: Answer) -> u64 {
        let index = self.next;
        self.next += 1;
        self.history.ops.push(Op {
            index,
            producer: 0,
            queue: QUEUE.to_owned(),
            id: id.to_owned(),
            kind,
            due_ms: due.map(|due| T0 + due),
            slot: 0,
            invoked: stamp(at),
            completed: stamp(at + 10),
            answer,
        });
        index
    }

    fn schedule(&mut self, id: &str, due: u64, at: u64, answer: Answer) -> u64 {
        self.op(id, OpKind::Schedule, Some(due), at, answer)
    }

    fn cancel(&mut self, id: &str, at: u64, answer: Answer) -> u64 {
        self.op(id, OpKind::Cancel, None, at, answer)
    }

    /// A fire of op `index` received at `at` from `node`, begun 2 ms before.
    fn fire(&mut self, id: &str, index: u64, due: u64, at: u64, node: &str) {
        self.history.fires.push(Fire {
            queue: QUEUE.to_owned(),
            id: id.to_owned(),
            due_ms: T0 + due,
            fired_ms: T0 + at - 2,
            attempt: 1,
            generation: 1,
            node: node.to_owned(),
            payload: Op::payload(index),
            received: stamp(at),
        });
    }

    fn fault(&mut self, kind: FaultKind, node: Option<&str>, from: u64, to: u64) {
        self.history.faults.push(Fault {
            kind,
            node: node.map(str::to_owned),
            slot: node.map(|_| 0),
            start: stamp(from),
            end: stamp(to),
        });
    }

    fn check(&self) -> Verdict {
        check(&self.history, &Rules::for_history(&self.history))
    }
}

fn rules_broken(verdict: &Verdict) -> Vec<Rule> {
    let mut rules: Vec<Rule> = verdict.violations.iter().map(|v| v.rule).collect();
    rules.dedup();
    rules
}

/// A history with every kind of operation as a healthy cluster answers them.
fn healthy() -> Build {
    let mut b = Build::new();
    // Scheduled, fired once.
    let s = b.schedule("a", 1_000, 100, created(1_000));
    b.fire("a", s, 1_000, 1_003, "a");
    // Replaced before its due: only the new due fires.
    b.schedule("b", 3_000, 100, created(3_000));
    let r = b.op("b", OpKind::Replace, Some(4_000), 1_000, replaced(3_000));
    b.fire("b", r, 4_000, 4_002, "b");
    // Cancelled before its due: nothing fires.
    b.schedule("c", 3_000, 100, created(3_000));
    b.cancel("c", 1_000, cancelled(true, false));
    // Resent after it fired: a duplicate; then a new life at another due.
    let s = b.schedule("d", 500, 100, created(500));
    b.fire("d", s, 500, 501, "a");
    b.op("d", OpKind::Resend, Some(500), 2_000, duplicate(500));
    let again = b.schedule("d", 5_000, 3_000, created(5_000));
    b.fire("d", again, 5_000, 5_001, "b");
    // Cancel while it runs: it fired, no retry.
    let s = b.schedule("e", 600, 100, created(600));
    b.fire("e", s, 600, 601, "a");
    b.cancel("e", 700, cancelled(false, true));
    b
}

#[test]
fn a_healthy_history_passes_with_its_counts() {
    let verdict = healthy().check();
    assert_eq!(verdict.violations, Vec::new());
    let counts = &verdict.counts;
    assert_eq!(counts.lost, 0);
    assert_eq!(counts.early, 0);
    assert_eq!(counts.fires, 5);
    assert_eq!(counts.groups, 7, "a, b x2, c, d x2, e");
    assert_eq!(
        counts.fates["must fire"], 5,
        "a, b, d x2, e: {:?}",
        counts.fates
    );
    assert_eq!(counts.fates["replaced"], 1);
    assert_eq!(counts.fates["cancelled"], 1);
    assert_eq!(counts.duplicates, 1);
    assert_eq!(counts.ops[&("resend", "duplicate")], 1);
    assert_eq!(counts.lateness.max, 3);
}

#[test]
fn an_acknowledged_schedule_that_never_fired_is_lost() {
    let mut b = healthy();
    b.schedule("lost", 2_000, 100, created(2_000));
    let verdict = b.check();
    assert_eq!(rules_broken(&verdict), vec![Rule::Lost]);
    assert_eq!(verdict.counts.lost, 1);
    assert!(verdict.violations[0].detail.contains("op "), "{verdict:?}");

    // The next operation found no live task: the first must have fired.
    let mut b = healthy();
    b.schedule("gone", 2_000, 100, created(2_000));
    b.schedule("gone", 9_000, 3_000, created(9_000));
    b.history.fires.push(Fire {
        payload: Op::payload(b.next - 1),
        ..fire_of(&b, "gone", 9_000, 9_001)
    });
    assert_eq!(rules_broken(&b.check()), vec![Rule::Lost]);
}

fn fire_of(b: &Build, id: &str, due: u64, at: u64) -> Fire {
    Fire {
        queue: QUEUE.to_owned(),
        id: id.to_owned(),
        due_ms: T0 + due,
        fired_ms: T0 + at,
        attempt: 1,
        generation: 1,
        node: "a".to_owned(),
        payload: Op::payload(b.next - 1),
        received: stamp(at),
    }
}

#[test]
fn a_resend_answered_duplicate_says_it_fired() {
    let mut b = healthy();
    b.schedule("dup", 1_000, 100, unknown());
    b.op("dup", OpKind::Resend, Some(1_000), 2_000, duplicate(1_000));
    let verdict = b.check();
    assert_eq!(rules_broken(&verdict), vec![Rule::Lost]);
    assert!(verdict.violations[0].detail.contains("duplicate"));
}

#[test]
fn an_unknown_answer_may_or_may_not_have_been_applied() {
    let mut b = healthy();
    b.schedule("maybe-not", 1_000, 100, unknown());
    let s = b.schedule("maybe", 1_000, 100, unknown());
    b.fire("maybe", s, 1_000, 1_001, "a");
    // Resent after a timeout, applied late: one fire of either payload.
    let s = b.schedule("late", 1_000, 100, unknown());
    b.op("late", OpKind::Resend, Some(1_000), 400, replaced(1_000));
    b.fire("late", s, 1_000, 1_002, "b");
    // Acknowledged, then replaced by an unknown answer: may not fire.
    b.schedule("open", 3_000, 100, created(3_000));
    b.op("open", OpKind::Replace, Some(4_000), 1_000, unknown());
    let verdict = b.check();
    assert_eq!(verdict.violations, Vec::new());
    assert_eq!(verdict.counts.fates["open (an unknown answer)"], 4);
}

#[test]
fn a_fire_before_its_due_is_early() {
    let mut b = healthy();
    let s = b.schedule("early", 2_000, 100, created(2_000));
    b.fire("early", s, 2_000, 1_990, "a");
    let verdict = b.check();
    assert_eq!(rules_broken(&verdict), vec![Rule::Early]);
    assert_eq!(verdict.counts.early, 1);
    assert_eq!(verdict.counts.earliest_ms, -10);

    // Within the tolerance (1 ms: the truncation to milliseconds) is not early.
    let mut b = healthy();
    let s = b.schedule("edge", 2_000, 100, created(2_000));
    b.fire("edge", s, 2_000, 1_999, "a");
    assert_eq!(b.check().violations, Vec::new());
}

#[test]
fn a_fire_after_cancelled_true_is_caught() {
    // At the due the cancel had taken away.
    let mut b = healthy();
    let s = b.schedule("x", 3_000, 100, created(3_000));
    b.cancel("x", 1_000, cancelled(true, false));
    b.fire("x", s, 3_000, 3_001, "a");
    let verdict = b.check();
    assert!(
        rules_broken(&verdict).contains(&Rule::FiredAfterCancel),
        "{verdict:?}"
    );

    // A task late past its due, cancelled while pending, whose run then began.
    let mut b = healthy();
    let s = b.schedule("y", 500, 100, created(500));
    b.cancel("y", 1_000, cancelled(true, false));
    b.fire("y", s, 500, 2_000, "a");
    b.fault(FaultKind::Stop, Some("a"), 400, 1_800);
    let verdict = b.check();
    assert_eq!(rules_broken(&verdict), vec![Rule::FiredAfterCancel]);
    assert!(verdict.violations[0].detail.contains("cancelled:true"));
}

#[test]
fn a_run_begun_before_a_cancel_of_a_task_scheduled_beside_it_may_end_after_it() {
    // "a" runs (claimed at its due), a replace arms a new schedule beside it, a cancel takes
    // the new one away: the old run's fire reaches the harness after the cancel's answer.
    let mut b = healthy();
    let s = b.schedule("z", 500, 100, created(500));
    b.op("z", OpKind::Replace, Some(5_000), 501, replaced(500));
    b.cancel("z", 520, cancelled(true, false));
    b.history.fires.push(Fire {
        fired_ms: T0 + 500,
        payload: Op::payload(s),
        ..fire_of(&b, "z", 500, 600)
    });
    let verdict = b.check();
    assert_eq!(verdict.violations, Vec::new());
    assert_eq!(verdict.counts.inflight_across_cancel, 1);
    assert_eq!(verdict.counts.raced_replaces, 1);
}

#[test]
fn a_replaced_task_firing_at_its_old_due_is_caught() {
    let mut b = healthy();
    let old = b.schedule("r", 3_000, 100, created(3_000));
    let new = b.op("r", OpKind::Replace, Some(4_000), 1_000, replaced(3_000));
    b.fire("r", old, 3_000, 3_001, "a");
    b.fire("r", new, 4_000, 4_001, "b");
    let verdict = b.check();
    assert_eq!(rules_broken(&verdict), vec![Rule::ReplacedFiredAtOldDue]);

    // A replace that came after the old due (the old run was under way) is no violation.
    let mut b = healthy();
    let old = b.schedule("r", 1_000, 100, created(1_000));
    let new = b.op("r", OpKind::Replace, Some(4_000), 1_000, replaced(1_000));
    b.fire("r", old, 1_000, 1_001, "a");
    b.fire("r", new, 4_000, 4_001, "b");
    let verdict = b.check();
    assert_eq!(verdict.violations, Vec::new());
    assert_eq!(verdict.counts.raced_replaces, 1);
}

#[test]
fn a_repeat_needs_a_fault_on_the_node_that_ran_it() {
    let repeated = || {
        let mut b = healthy();
        let s = b.schedule("twice", 1_000, 100, created(1_000));
        b.fire("twice", s, 1_000, 1_001, "a");
        b.fire("twice", s, 1_000, 3_500, "b");
        b
    };
    let verdict = repeated().check();
    assert_eq!(rules_broken(&verdict), vec![Rule::UnexplainedRepeat]);
    assert_eq!(verdict.counts.unexplained, 1);

    // A fault on the other node explains nothing (it ended before that node's run began).
    let mut b = repeated();
    b.fault(FaultKind::Stop, Some("b"), 1_100, 1_900);
    assert_eq!(rules_broken(&b.check()), vec![Rule::UnexplainedRepeat]);

    // Nor does a fault on that node well after its run ended.
    let mut b = repeated();
    b.fault(FaultKind::Blackhole, Some("a"), 4_400, 4_500);
    assert_eq!(rules_broken(&b.check()), vec![Rule::UnexplainedRepeat]);

    // Nor one on that node that ended before the task was due (it cannot have been
    // claimed yet), however close.
    let mut b = repeated();
    b.fault(FaultKind::Stop, Some("a"), 200, 999);
    assert_eq!(rules_broken(&b.check()), vec![Rule::UnexplainedRepeat]);

    // A kill of that node while it ran does, and so does a Redis restart.
    for (kind, node) in [
        (FaultKind::Kill, Some("a")),
        (FaultKind::RedisRestart, None),
    ] {
        let mut b = repeated();
        b.fault(kind, node, 1_100, 1_900);
        let verdict = b.check();
        assert_eq!(verdict.violations, Vec::new(), "{kind:?}");
        assert_eq!(verdict.counts.repeats[&kind], 1);
    }

    // A Redis restart that ended before the run began explains nothing: the run had a fresh
    // claim (the defect a late claim with an expired lease was: the same node ran the task
    // twice right after Redis came back).
    let mut b = healthy();
    let s = b.schedule("after", 1_000, 100, created(1_000));
    b.fire("after", s, 1_000, 2_502, "a");
    b.fire("after", s, 1_000, 2_600, "a");
    b.fault(FaultKind::RedisRestart, None, 900, 2_300);
    assert_eq!(rules_broken(&b.check()), vec![Rule::UnexplainedRepeat]);

    // A stopped node's fire may reach the harness last: still one fire without a fault.
    let mut b = healthy();
    let s = b.schedule("zombie", 1_000, 100, created(1_000));
    b.history.fires.push(Fire {
        fired_ms: T0 + 1_001,
        payload: Op::payload(s),
        ..fire_of(&b, "zombie", 1_000, 5_000)
    });
    b.fire("zombie", s, 1_000, 3_500, "b");
    b.fault(FaultKind::Stop, Some("a"), 1_002, 4_900);
    let verdict = b.check();
    assert_eq!(verdict.violations, Vec::new());
    assert_eq!(verdict.counts.repeats[&FaultKind::Stop], 1);
}

#[test]
fn a_fire_a_cancel_then_found_pending_again_needs_a_fault() {
    let undone = || {
        let mut b = healthy();
        let s = b.schedule("u", 500, 100, created(500));
        b.fire("u", s, 500, 501, "a");
        b.cancel("u", 4_000, cancelled(true, false));
        b
    };
    let verdict = undone().check();
    assert_eq!(rules_broken(&verdict), vec![Rule::UnexplainedRepeat]);
    let mut b = undone();
    b.fault(FaultKind::Blackhole, Some("a"), 600, 3_000);
    let verdict = b.check();
    assert_eq!(verdict.violations, Vec::new());
    assert_eq!(verdict.counts.undone[&FaultKind::Blackhole], 1);
}

#[test]
fn a_duplicate_schedule_that_fires_is_caught() {
    let mut b = healthy();
    let s = b.schedule("d2", 500, 100, created(500));
    b.fire("d2", s, 500, 501, "a");
    let resend = b.op("d2", OpKind::Resend, Some(500), 2_000, duplicate(500));
    b.fire("d2", resend, 500, 2_005, "b");
    assert_eq!(rules_broken(&b.check()), vec![Rule::DuplicateFired]);
}

#[test]
fn a_fire_of_no_schedule_or_at_another_due_is_caught() {
    let mut b = healthy();
    b.history.fires.push(Fire {
        payload: "op-999".to_owned(),
        ..fire_of(&b, "nobody", 500, 501)
    });
    let s = b.schedule("w", 500, 100, created(500));
    b.history.fires.push(Fire {
        payload: Op::payload(s),
        ..fire_of(&b, "w", 600, 601)
    });
    let verdict = b.check();
    assert_eq!(rules_broken(&verdict), vec![Rule::Misattributed]);
    assert_eq!(verdict.violations.len(), 2);
}

#[test]
fn the_producers_may_only_resend_after_an_unknown_answer() {
    let mut b = healthy();
    b.schedule("p", 1_000, 100, unknown());
    b.op("p", OpKind::Replace, Some(3_000), 500, created(3_000));
    let verdict = b.check();
    assert!(rules_broken(&verdict).contains(&Rule::HarnessProtocol));
}
