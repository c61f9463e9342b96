//! The driver: turns the ticks of recurring schedules into tasks, with no leader.
//!
//! # Ownership
//! Each of the store's [`RECURRING_SHARDS`] shards is driven by one live node, chosen by
//! rendezvous hashing of the shard over every member (whatever queues the members serve), so
//! a membership change moves only the shards it must, and a dead node's shards are driven by
//! their new owner as soon as the membership drops it.
//!
//! # One step of a schedule
//! The driver looks at its shards (one call each) for schedules whose next tick falls within
//! [`TICK_LEAD`], and for each one takes a *step* from the record it read:
//! 1. forget the ledger entries of the ticks the previous step created (the state has moved
//!    past them, so nothing can create them again);
//! 2. decide which ticks to create: the next tick, unless `overlap: skip` finds the previous
//!    tick still pending or running; or, when the next tick is later than `misfire_grace`,
//!    what the misfire policy says of the missed ticks;
//! 3. create each tick's task through the partition's tick ledger (a repeat is a no-op);
//! 4. compare-and-set the record from the one read to the advanced one.
//!
//! A node killed between any two steps leaves a record that still names the tick as next:
//! the next owner repeats the step, and step 3 does nothing for ticks already created. Two
//! nodes that both believe they drive a shard (a membership change) both run the idempotent
//! steps, and only one compare-and-set wins; the loser reads again. A step that loses to a
//! user's change (update, pause, delete) hands the ticks it created to the new record (their
//! ledger entries are forgotten later) and cancels them if the schedule was paused or deleted.
//!
//! # Timing
//! Ticks are created [`TICK_LEAD`] before their time ([`OVERLAP_SKIP_LEAD`] with
//! `overlap: skip`, so the overlap check sees the previous tick as late as it can), so that
//! the partition's owner holds them in its timer and fires them with a task's precision. The
//! driver sleeps until the earliest next tick of its shards minus the lead, and looks at
//! least every `pull_period` (a schedule created or resumed on another node is seen then; on
//! this node at once).

use std::collections::HashMap;
use std::time::Duration;

use delayq_coordinator::{Membership, NodeId};
use delayq_storage::{
    NewTask, Partition, ShardLook, StoredSchedule, TaskId, TaskState, TickOutcome, RECURRING_SHARDS,
};
use tokio::sync::watch;

use super::api::{first_tick_after, tick_id};
use super::calendar::Calendar;
use super::record::ScheduleRecord;
use super::spec::{Misfire, Overlap, RecurringSpec};
use crate::error::EngineResult;
use crate::scheduler::Scheduler;

/// How long before its time a tick's task is created: long enough for the partition's owner
/// to hold it in its timer, and not a whole second, so that creating the next tick of a
/// second-aligned cadence does not compete with firing this one.
pub const TICK_LEAD: Duration = Duration::from_millis(750);
/// The lead of a schedule with `overlap: skip`.
pub const OVERLAP_SKIP_LEAD: Duration = Duration::from_millis(200);
/// Schedules taken from one shard per look.
const DUE_LIMIT: usize = 100;
/// Steps of one schedule retried after a lost compare-and-set, per look.
const STEP_ATTEMPTS: usize = 10;

/// The shard's owner among all members: the highest rendezvous weight of `(shard, node)`.
fn shard_owner(shard: u32, members: &Membership) -> Option<&NodeId> {
    members
        .members
        .iter()
        .max_by_key(|member| {
            let key = format!("recurring\0{shard}\0{}", member.id.as_str());
            (
                delayq_storage::stable_hash(key.as_bytes()),
                member.id.clone(),
            )
        })
        .map(|member| &member.id)
}

/// The shards `node` drives in `membership`.
pub(crate) fn owned_shards(node: &NodeId, membership: &Membership) -> Vec<u32> {
    (0..RECURRING_SHARDS)
        .filter(|&shard| shard_owner(shard, membership) == Some(node))
        .collect()
}

/// Runs until the scheduler stops: drives the shards this node owns.
pub(crate) async fn run_driver(scheduler: Scheduler, mut membership: watch::Receiver<Membership>) {
    let runtime = scheduler.runtime.clone();
    let pull_period = runtime.config.engine.pull_period.as_millis() as u64;
    let mut shards: Vec<u32> = Vec::new();
    let mut epoch = None;
    // Per owned shard: when to look at it again, and its schedule count at the last look.
    let mut looks: HashMap<u32, (u64, u64)> = HashMap::new();
    // Every shard is looked at least every pull period (schedules set on other nodes), and
    // at once after a membership change or a change made on this node.
    let mut next_full_look = 0;
    loop {
        {
            let current = membership.borrow_and_update();
            if epoch != Some(current.epoch) {
                epoch = Some(current.epoch);
                shards = owned_shards(runtime.coordinator.node_id(), &current);
                looks.retain(|shard, _| shards.contains(shard));
                next_full_look = 0;
                tracing::debug!(?shards, "recurring shards driven by this node");
            }
        }
        let now = scheduler.now_ms();
        let full = now >= next_full_look;
        if full {
            next_full_look = now + pull_period;
        }
        let looked: Vec<u32> = shards
            .iter()
            .copied()
            .filter(|shard| full || looks.get(shard).is_none_or(|&(wake_at, _)| wake_at <= now))
            .collect();
        if !looked.is_empty() {
            match drive_shards(&scheduler, &looked).await {
                Ok(driven) => {
                    for (shard, (wake_at, count)) in looked.iter().zip(driven) {
                        looks.insert(*shard, (wake_at.unwrap_or(u64::MAX), count));
                    }
                }
                Err(error) => {
                    tracing::warn!(shards = ?looked, %error, "driving recurring schedules failed; trying again");
                    let retry_at = scheduler.now_ms() + 200;
                    for shard in looked {
                        let count = looks.get(&shard).map_or(0, |&(_, count)| count);
                        looks.insert(shard, (retry_at, count));
                    }
                }
            }
        }
        let schedules: u64 = looks.values().map(|&(_, count)| count).sum();
        metrics::gauge!("delayq_recurring_schedules").set(schedules as f64);
        let wake_at = looks
            .values()
            .map(|&(wake_at, _)| wake_at)
            .fold(next_full_look, u64::min);
        let wake_in = Duration::from_millis(wake_at.saturating_sub(scheduler.now_ms()));
        tokio::select! {
            biased;
            _ = runtime.stop.cancelled() => return,
            _ = membership.changed() => {}
            _ = runtime.recurring_changed.notified() => next_full_look = 0,
            _ = tokio::time::sleep(wake_in.max(Duration::from_millis(2))) => {}
        }
    }
}

/// The earlier of two optional times.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Steps every due schedule of each of `shards`, looking at all of them with one store call
/// ([`RecurringStore::recurring_due_many`](delayq_storage::RecurringStore::recurring_due_many));
/// returns, per shard in order, when to look at it again and its schedule count.
async fn drive_shards(
    scheduler: &Scheduler,
    shards: &[u32],
) -> EngineResult<Vec<(Option<u64>, u64)>> {
    let until = scheduler.now_ms() + TICK_LEAD.as_millis() as u64;
    let looks = scheduler
        .runtime
        .store
        .recurring_due_many(shards, until, DUE_LIMIT)
        .await?;
    let mut driven = Vec::with_capacity(shards.len());
    for (&shard, mut look) in shards.iter().zip(looks) {
        let mut wake_at = None;
        loop {
            let full = look.due.len() >= DUE_LIMIT;
            wake_at = earliest(wake_at, step_look(scheduler, &look).await);
            if !full {
                break;
            }
            // More were due than one look returns: read the shard again.
            let until = scheduler.now_ms() + TICK_LEAD.as_millis() as u64;
            look = scheduler
                .runtime
                .store
                .recurring_due(shard, until, DUE_LIMIT)
                .await?;
        }
        driven.push((wake_at, look.schedules));
    }
    Ok(driven)
}

/// Steps the due schedules of one look at a shard; returns when to look at the shard again
/// (the earliest of its next tick and each stepped schedule's, each minus its lead).
async fn step_look(scheduler: &Scheduler, look: &ShardLook) -> Option<u64> {
    let lead = TICK_LEAD.as_millis() as u64;
    let mut wake_at = look.next_ms.map(|next| next.saturating_sub(lead));
    for stored in &look.due {
        match step_schedule(scheduler, stored.clone()).await {
            Ok(step_wake_at) => wake_at = earliest(wake_at, step_wake_at),
            Err(error) => {
                tracing::warn!(schedule = %stored.name, %error, "a recurring schedule's step failed; it is retried");
                wake_at = earliest(wake_at, Some(scheduler.now_ms() + 200));
            }
        }
    }
    wake_at
}

/// What one step decided.
#[derive(Debug, Default)]
struct Plan {
    /// Ticks to create, oldest first.
    create: Vec<u64>,
    skipped: u64,
    missed: u64,
    /// The next tick after this step.
    next_ms: Option<u64>,
}

/// Steps one schedule from the record read (repeating after a lost compare-and-set); returns
/// when to step it again (its next tick minus its lead).
async fn step_schedule(scheduler: &Scheduler, stored: StoredSchedule) -> EngineResult<Option<u64>> {
    let store = scheduler.runtime.store.clone();
    let name = stored.name.clone();
    let mut current = Some(stored);
    // Ticks created by earlier attempts of this call, to hand to whatever record wins.
    let mut created: Vec<u64> = Vec::new();
    for _ in 0..STEP_ATTEMPTS {
        let Some(stored) = current.take() else {
            // Deleted meanwhile: what this call created must not fire.
            return Ok(None);
        };
        let Ok(record) = ScheduleRecord::decode(&stored.record) else {
            tracing::warn!(schedule = %name, "unreadable schedule record; leaving it alone");
            return Ok(None);
        };
        let Ok(spec) = record.spec() else {
            tracing::warn!(schedule = %name, "unreadable schedule spec; leaving it alone");
            return Ok(None);
        };
        let calendar = match spec.calendar() {
            Ok(calendar) => calendar,
            Err(error) => {
                tracing::warn!(schedule = %name, %error, "invalid stored spec; leaving it alone");
                return Ok(None);
            }
        };
        let now = scheduler.now_ms();
        let lead = match spec.overlap {
            Overlap::Skip => OVERLAP_SKIP_LEAD,
            Overlap::Allow => TICK_LEAD,
        }
        .as_millis() as u64;
        let due = record.next_ms.filter(|&next| next <= now + lead);
        let mut next_record = record.clone();
        let mut plan = Plan::default();
        if let Some(next) = due {
            scheduler
                .forget_ticks(&spec.queue, &name, &record.unforgotten)
                .await;
            plan = decide(scheduler, &name, &spec, &calendar, &record, next, now).await?;
            for &tick in &plan.create {
                create_tick(scheduler, &name, &spec, tick).await?;
                if !created.contains(&tick) {
                    created.push(tick);
                }
            }
            next_record.next_ms = plan.next_ms;
            next_record.last_tick_ms = plan.create.last().copied().or(record.last_tick_ms);
            next_record.unforgotten = created.clone();
            next_record.fired += plan.create.len() as u64;
            next_record.skipped += plan.skipped;
            next_record.missed += plan.missed;
        } else if created.is_empty() {
            // Not due (any more): a user moved it, or it is paused. Look again later.
            return Ok(record.next_ms.map(|next| next.saturating_sub(lead)));
        } else {
            // Lost to a user's change after creating ticks: hand them to the new record.
            for tick in &created {
                if !next_record.unforgotten.contains(tick) {
                    next_record.unforgotten.push(*tick);
                }
            }
            if record.paused_ms.is_some() {
                scheduler
                    .cancel_pending_ticks(&spec.queue, &name, &created, now)
                    .await;
            }
        }
        let text = next_record.encode();
        if store
            .recurring_swap(
                &name,
                Some(&stored.record),
                Some(&text),
                next_record.next_ms,
            )
            .await?
        {
            record_outcomes(&name, &plan);
            if !plan.create.is_empty() || plan.skipped > 0 || plan.missed > 0 {
                tracing::debug!(schedule = %name, created = ?plan.create, skipped = plan.skipped, missed = plan.missed, next_ms = ?plan.next_ms, "recurring step");
            }
            return Ok(next_record.next_ms.map(|next| next.saturating_sub(lead)));
        }
        current = store.recurring_get(&name).await?;
        if current.is_none() && !created.is_empty() {
            scheduler
                .cancel_pending_ticks(&spec.queue, &name, &created, 0)
                .await;
            scheduler.forget_ticks(&spec.queue, &name, &created).await;
        }
    }
    tracing::warn!(schedule = %name, "a recurring schedule kept changing during its step; retried on the next look");
    Ok(Some(scheduler.now_ms()))
}

/// Decides the ticks of the step whose next tick is `next` (due within the lead).
async fn decide(
    scheduler: &Scheduler,
    name: &str,
    spec: &RecurringSpec,
    calendar: &Calendar,
    record: &ScheduleRecord,
    next: u64,
    now: u64,
) -> EngineResult<Plan> {
    let grace = spec.misfire_grace_ms;
    let mut plan = Plan::default();
    if now > next.saturating_add(grace) {
        // Missed: the ticks in [next, now - grace) could not fire within their grace.
        let last_missed = now - grace - 1;
        let until = match spec.end_at_ms {
            Some(end) => last_missed.min(end.saturating_sub(1)),
            None => last_missed,
        };
        let keep = match spec.misfire {
            Misfire::Skip => 0,
            Misfire::Once => 1,
            Misfire::All => spec.max_catchup as usize,
        };
        let (count, newest) = calendar.ticks_in(next - 1, until, record.anchor_ms, keep);
        let count = count.max(1);
        plan.create = newest;
        plan.missed = count.saturating_sub(plan.create.len() as u64);
        plan.next_ms = first_tick_after(spec, calendar, record.anchor_ms, last_missed);
        return Ok(plan);
    }
    plan.next_ms = first_tick_after(spec, calendar, record.anchor_ms, next);
    if spec.overlap == Overlap::Skip {
        if let Some(previous) = record.last_tick_ms {
            let info = scheduler
                .get(spec.queue.as_str(), &tick_id(name, previous))
                .await?;
            if info
                .is_some_and(|info| matches!(info.state, TaskState::Pending | TaskState::Inflight))
            {
                plan.skipped = 1;
                return Ok(plan);
            }
        }
    }
    plan.create = vec![next];
    Ok(plan)
}

/// Creates the task of one tick through the tick ledger, and tells the partition's owner.
async fn create_tick(
    scheduler: &Scheduler,
    name: &str,
    spec: &RecurringSpec,
    tick: u64,
) -> EngineResult<()> {
    let layout = scheduler.layout_for_write(&spec.queue).await?;
    let id = TaskId::new(tick_id(name, tick))?;
    let partition = Partition::new(spec.queue.clone(), layout.partition_of(&id));
    let payload = spec.payload.clone().unwrap_or_default();
    let task = NewTask {
        id,
        due_ms: tick,
        payload: payload.into(),
        traceparent: None,
    };
    let now = scheduler.now_ms();
    let outcome = scheduler
        .runtime
        .store
        .create_tick(&partition, task)
        .await?;
    if outcome == TickOutcome::Created {
        crate::admin::record_scheduled(&partition.queue, &delayq_storage::ScheduleOutcome::Created);
        scheduler
            .announce(
                &partition,
                tick,
                now,
                &delayq_storage::ScheduleOutcome::Created,
            )
            .await;
    }
    Ok(())
}

fn record_outcomes(name: &str, plan: &Plan) {
    let counts = [
        ("fired", plan.create.len() as u64),
        ("skipped", plan.skipped),
        ("missed", plan.missed),
    ];
    for (outcome, count) in counts {
        if count > 0 {
            metrics::counter!("delayq_recurring_ticks_total", "schedule" => name.to_owned(), "outcome" => outcome)
                .increment(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use delayq_coordinator::{Member, QueueFilter};

    use super::*;

    fn membership(ids: &[&str]) -> Membership {
        Membership {
            epoch: 1,
            members: ids
                .iter()
                .map(|id| Member {
                    id: NodeId::from_string(id),
                    queues: QueueFilter::Only(Vec::new()),
                })
                .collect(),
        }
    }

    #[test]
    fn every_shard_has_exactly_one_driver_whatever_queues_the_members_serve() {
        let members = membership(&["node-a", "node-b", "node-c"]);
        let mut all: Vec<u32> = ["node-a", "node-b", "node-c"]
            .iter()
            .flat_map(|id| owned_shards(&NodeId::from_string(id), &members))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..RECURRING_SHARDS).collect::<Vec<_>>());
        assert!(owned_shards(&NodeId::from_string("stranger"), &members).is_empty());
        assert!(owned_shards(&NodeId::from_string("x"), &membership(&[])).is_empty());
    }

    #[test]
    fn a_leaving_member_moves_only_its_own_shards() {
        let before = membership(&["node-a", "node-b", "node-c"]);
        let after = membership(&["node-a", "node-b"]);
        for id in ["node-a", "node-b"] {
            let node = NodeId::from_string(id);
            let kept = owned_shards(&node, &before);
            let now = owned_shards(&node, &after);
            assert!(
                kept.iter().all(|shard| now.contains(shard)),
                "{id}: {kept:?} -> {now:?}"
            );
        }
    }
}
