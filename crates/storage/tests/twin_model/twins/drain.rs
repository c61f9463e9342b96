//! The end of a case on queues with flow keys: the model drains, and no task may be lost.
//!
//! The queues are resumed, the clock moves past every lease of the case (their handlers are
//! taken as gone: only lease expiry ends those runs), and then each round sweeps, claims and
//! acks every partition with something pending or in flight until nothing is left, moving
//! the clock on by more than any rate period between rounds. Every step is compared, and
//! every claim checked against the per-key limits, as during the case. A task still pending
//! (held back or not) or in flight after [`ROUNDS`] rounds is lost: its key waits for a
//! release that never comes.
//!
//! A run orphaned by a cancel (a running task of a key scheduled again, and that new schedule
//! cancelled: the cancel drops the old run's in-flight entry) gives its slot back at the
//! cancel in both stores; the account does the same (`limits::Limits::cancelled`). Before
//! that, the key stayed blocked for good: this drain found it.

use delayq_storage::{Partition, PartitionStats, TaskStore};

use super::{settle, t, Step, Twins, ALL};
use crate::normal::{res, Answer};
use crate::ops::{OWNERS, SLOT};

/// The most drain rounds: far more than a case's tasks need (each round runs every key's
/// slots at least once and clears every rate period).
pub const ROUNDS: usize = 60;

/// How far the clock moves at the start of the drain: past every lease of the case (at most
/// 100 slots after its claim, or 6 after a renew) and every retry.
const PAST_EVERY_LEASE_MS: u64 = 1_100;

/// How far the clock moves between rounds: more than any rate period drawn.
const ROUND_MS: u64 = 6 * SLOT;

/// The most claims of one partition in one round (each acked at once).
const CLAIMS_PER_ROUND: usize = 32;

impl Twins {
    /// The index of a new operation of the drain (its start noted).
    fn drain_op(&mut self) -> usize {
        self.begin();
        self.checkpoints.len() - 1
    }

    /// Every partition of the universe.
    fn partitions(&self) -> Vec<Partition> {
        self.queues
            .iter()
            .flat_map(|(queue, partitions)| {
                (0..*partitions).map(|index| Partition::new(queue.clone(), index))
            })
            .collect()
    }

    /// Resumes every queue and moves the clock past every lease of the case.
    pub async fn drain_start(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        for (queue, partitions) in self.queues.clone() {
            self.drain_op();
            let raw = each!(self, |store, side| store
                .set_paused(&queue, partitions, false)
                .await);
            settle().await;
            let answers = self.pair(raw, |_, r| Answer::Paused(res(r, |o| o)));
            steps.push(Step::new(format!("set_paused {queue} false"), answers));
        }
        self.now_ms += PAST_EVERY_LEASE_MS;
        let now = self.now_ms - crate::ops::BASE;
        steps.push(Step::new(
            format!("advance to {}", t(self.now_ms)),
            [Answer::Advanced(now), Answer::Advanced(now)],
        ));
        steps
    }

    /// The real store's counts of every partition, with the steps that read them.
    async fn all_stats(&mut self, steps: &mut Vec<Step>) -> Vec<(Partition, PartitionStats)> {
        let mut counts = Vec::new();
        for partition in self.partitions() {
            self.drain_op();
            let now_ms = self.now_ms;
            let raw = each!(self, |store, side| store.stats(&partition, now_ms).await);
            if let Ok(stats) = &raw[0] {
                counts.push((partition.clone(), *stats));
            }
            let answers = self.pair(raw, |_, r| Answer::Stats(res(r, |s| s)));
            steps.push(Step::new(
                format!("stats {partition} at {}", t(now_ms)),
                answers,
            ));
        }
        counts
    }

    /// One round of the drain: the steps, and whether nothing was left to do.
    pub async fn drain_round(&mut self) -> (Vec<Step>, bool) {
        let mut steps = Vec::new();
        let busy: Vec<Partition> = self
            .all_stats(&mut steps)
            .await
            .into_iter()
            .filter(|(_, stats)| stats.pending > 0 || stats.inflight > 0)
            .map(|(partition, _)| partition)
            .collect();
        if busy.is_empty() {
            return (steps, true);
        }
        for partition in busy {
            let n = self.drain_op();
            let (what, answers) = self.requeue_expired(n, &partition, ALL).await;
            steps.push(Step::new(what, answers));
            for _ in 0..CLAIMS_PER_ROUND {
                let n = self.drain_op();
                let (what, answers, leases) = self.claim(n, &partition, ALL, 10, OWNERS[0]).await;
                steps.push(Step::new(what, answers));
                if leases.is_empty() {
                    break;
                }
                for index in leases {
                    self.drain_op();
                    let what = format!("ack {}", Self::describe(&self.leases[index]));
                    let answers = self.ack_lease(index).await;
                    steps.push(Step::new(what, answers));
                }
            }
        }
        self.now_ms += ROUND_MS;
        let now = self.now_ms - crate::ops::BASE;
        steps.push(Step::new(
            format!("advance to {}", t(self.now_ms)),
            [Answer::Advanced(now), Answer::Advanced(now)],
        ));
        (steps, false)
    }

    /// After the drain (`finished`: a round found nothing left): the held keys of every
    /// partition, checked against the account; a task left, or a hold left in the account,
    /// is a violation.
    pub async fn drained(&mut self, finished: bool) -> Vec<Step> {
        let mut steps = Vec::new();
        let counts = self.all_stats(&mut steps).await;
        for partition in self.partitions() {
            self.drain_op();
            let answers = self.held_keys("after the drain", &partition).await;
            steps.push(Step::new(format!("held_keys {partition}"), answers));
        }
        let Some(limits) = self.limits.as_mut() else {
            return steps;
        };
        if !finished {
            let left: Vec<String> = counts
                .iter()
                .filter(|(_, stats)| stats.pending > 0 || stats.inflight > 0)
                .map(|(partition, stats)| format!("{partition}: {stats:?}"))
                .collect();
            limits.violations.push(format!(
                "tasks lost: after {ROUNDS} drain rounds still pending or in flight: {}",
                left.join("; ")
            ));
        }
        let holds = limits.remaining();
        if !holds.is_empty() {
            limits.violations.push(format!(
                "after the drain the account still has holds: {}",
                holds.join("; ")
            ));
        }
        steps
    }
}
