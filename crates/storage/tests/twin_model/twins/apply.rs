//! One operation of a case, resolved against the universe and run on both stores.

use bytes::Bytes;
use delayq_storage::{
    AckOutcome, Cancel, FailAction, FailOutcome, LookRequest, NewTask, Partition, ScheduleMode,
    ScheduleOutcome, TaskStore, MAX_DUE_MS,
};

use super::{due_ms, settle, t, Lease, Step, Twins};
use crate::limits::Report;
use crate::normal::{res, Answer};
use crate::ops::{Due, Op, Retry, BASE, OWNERS, PAYLOADS, SLOT};

impl Twins {
    /// Runs operation `n` on both stores.
    pub async fn apply(&mut self, n: usize, op: &Op) -> Step {
        let (what, answers) = self.run(n, op).await;
        Step::new(what, answers)
    }

    async fn run(&mut self, n: usize, op: &Op) -> (String, [Answer; 2]) {
        match *op {
            Op::Schedule { queue, task, mode } => {
                let (partition, task) = self.new_task(queue, task);
                self.note_scheduled(&partition, &task);
                self.schedule("schedule", &partition, task, mode).await
            }
            Op::Resend {
                task,
                payload,
                mode,
            } => {
                let (partition, id) = self.task(task);
                let key = (partition.queue.clone(), id.clone());
                let due_ms = self.scheduled.get(&key).copied().unwrap_or(BASE);
                let payload = PAYLOADS[usize::from(payload) % PAYLOADS.len()];
                let task = NewTask {
                    id,
                    due_ms,
                    payload: Bytes::from_static(payload.as_bytes()),
                    traceparent: None,
                };
                self.schedule("resend", &partition, task, mode).await
            }
            Op::ScheduleMany { ref items, mode } => {
                let items: Vec<_> = items
                    .iter()
                    .map(|&(queue, spec)| self.new_task(queue, spec))
                    .collect();
                for (partition, task) in &items {
                    self.note_scheduled(partition, task);
                }
                let listed: Vec<String> = items
                    .iter()
                    .map(|(p, task)| {
                        format!("{p} {} {} {}B", task.id, t(task.due_ms), task.payload.len())
                    })
                    .collect();
                let what = format!("schedule_many mode {mode} [{}]", listed.join(", "));
                let raw = each!(self, |store, side| store
                    .schedule_many(items.clone(), mode)
                    .await);
                if let (Some(limits), Ok(outcomes)) = (self.limits.as_mut(), &raw[0]) {
                    for ((partition, task), outcome) in items.iter().zip(outcomes) {
                        if let Ok(ScheduleOutcome::Replaced { .. }) = outcome {
                            limits.replaced(partition, &task.id);
                        }
                    }
                }
                let answers = self.pair(raw, |_, r| {
                    Answer::ScheduledMany(res(r, |items| {
                        items.into_iter().map(|item| res(item, |o| o)).collect()
                    }))
                });
                (what, answers)
            }
            Op::Cancel { task } => {
                let (partition, id) = self.task(task);
                let raw = each!(self, |store, side| store.cancel(&partition, &id).await);
                if let (Some(limits), Ok(Cancel::Cancelled)) = (self.limits.as_mut(), &raw[0]) {
                    limits.cancelled(&partition, &id);
                }
                let answers = self.pair(raw, |_, r| Answer::Cancelled(res(r, |c| c)));
                (format!("cancel {partition} {id}"), answers)
            }
            Op::Get { task } => {
                let (partition, id) = self.task(task);
                let answers = self.get(&partition, &id).await;
                (format!("get {partition} {id}"), answers)
            }
            Op::Claim {
                at,
                limit,
                lease_slots,
                owner,
            } => {
                let partition = self.partition(at);
                let owner = OWNERS[usize::from(owner) % OWNERS.len()];
                let (what, answers, _) = self
                    .claim(n, &partition, usize::from(limit), lease_slots, owner)
                    .await;
                (what, answers)
            }
            Op::RecoverClaim { lease, same_owner } => {
                let Some(held) = self.lease(lease) else {
                    return ("recover_claim (no lease yet)".to_owned(), Self::skipped());
                };
                let partition = held.partition.clone();
                let owner = if same_owner {
                    held.owner
                } else {
                    "someone-else"
                };
                let deadline_ms = held.deadline_ms;
                let what = format!(
                    "recover_claim {partition} by {owner} lease until {}",
                    t(deadline_ms)
                );
                if !self.receipt_is_fresh(&partition) {
                    return (
                        format!("{what} (skipped: receipt too old)"),
                        Self::skipped(),
                    );
                }
                let raw = each!(self, |store, side| store
                    .recover_claim(&partition, owner, deadline_ms)
                    .await);
                let answers = self.pair(raw, |norm, r| {
                    Answer::Claim(res(r, |batch| norm.batch(&partition, &batch)))
                });
                (what, answers)
            }
            Op::Ack { lease } => {
                let Some(held) = self.lease(lease) else {
                    return ("ack (no lease yet)".to_owned(), Self::skipped());
                };
                let what = format!("ack {}", Self::describe(held));
                let index = usize::from(lease) % self.leases.len();
                (what, self.ack_lease(index).await)
            }
            Op::Fail { lease, retry } => {
                let Some(held) = self.lease(lease) else {
                    return ("fail (no lease yet)".to_owned(), Self::skipped());
                };
                let action = match retry {
                    Retry::In(slots) => FailAction::RetryAt(self.now_ms + u64::from(slots) * SLOT),
                    Retry::Invalid => FailAction::RetryAt(MAX_DUE_MS + 1),
                    Retry::Dead => FailAction::DeadLetter,
                    Retry::Requeue(slots) => {
                        FailAction::RequeueAt(self.now_ms + u64::from(slots) * SLOT)
                    }
                };
                let shown = match action {
                    FailAction::RetryAt(at) => format!("retry at {}", t(at)),
                    FailAction::DeadLetter => "dead letter".to_owned(),
                    FailAction::RequeueAt(at) => format!("requeue at {}", t(at)),
                };
                let what = format!("fail {} {shown}", Self::describe(held));
                let tokens = held.tokens.clone();
                let partition = held.partition.clone();
                let error = format!("failed in op {n}");
                let raw = each!(self, |store, side| store
                    .fail(&tokens[side], &error, action)
                    .await);
                settle().await;
                if let Some(limits) = self.limits.as_mut() {
                    let report = match &raw[0] {
                        Ok(FailOutcome::Retrying { .. }) => Report::Retrying,
                        Ok(FailOutcome::DeadLettered) => Report::DeadLettered,
                        Ok(FailOutcome::Superseded) => Report::Superseded,
                        Err(_) => Report::Stale,
                    };
                    let index = usize::from(lease) % self.leases.len();
                    limits.reported(&partition, &tokens[0].id, index, report);
                }
                (what, self.pair(raw, |_, r| Answer::Failed(res(r, |o| o))))
            }
            Op::Renew { lease, slots } => {
                let Some(held) = self.lease(lease) else {
                    return ("renew (no lease yet)".to_owned(), Self::skipped());
                };
                let deadline_ms = self.now_ms + u64::from(slots) * SLOT;
                let what = format!("renew {} until {}", Self::describe(held), t(deadline_ms));
                let tokens = held.tokens.clone();
                let partition = held.partition.clone();
                let raw = each!(self, |store, side| store
                    .renew(&tokens[side], deadline_ms)
                    .await);
                if let (Some(limits), Ok(())) = (self.limits.as_mut(), &raw[0]) {
                    let index = usize::from(lease) % self.leases.len();
                    limits.renewed(&partition, &tokens[0].id, index, deadline_ms);
                }
                (what, self.pair(raw, |_, r| Answer::Renewed(res(r, |o| o))))
            }
            Op::Advance { slots } => {
                self.now_ms += u64::from(slots) * SLOT;
                let now = self.now_ms - BASE;
                (
                    format!("advance to {}", t(self.now_ms)),
                    [Answer::Advanced(now), Answer::Advanced(now)],
                )
            }
            Op::RequeueExpired { at, limit } => {
                let partition = self.partition(at);
                self.requeue_expired(n, &partition, usize::from(limit))
                    .await
            }
            Op::Look {
                at,
                window_slots,
                window_limit,
                requeue_limit,
                prune,
                prune_limit,
            } => {
                let partition = self.partition(at);
                let prune = prune.map(|before| self.cutoff(before));
                let request = LookRequest {
                    now_ms: self.now_ms,
                    window_end_ms: self.now_ms + u64::from(window_slots) * SLOT,
                    window_limit: usize::from(window_limit),
                    requeue_limit: usize::from(requeue_limit),
                    prune_before_ms: prune.map(|(_, wall)| wall),
                    prune_limit: usize::from(prune_limit),
                };
                let pruning = match prune {
                    Some((op, _)) => format!(" prune done before op {op} limit {prune_limit}"),
                    None => String::new(),
                };
                let what = format!(
                    "look {partition} at {} window to {} limit {window_limit} requeue limit {requeue_limit}{pruning}",
                    t(request.now_ms),
                    t(request.window_end_ms),
                );
                let raw = each!(self, |store, side| store.look(&partition, &request).await);
                if let (Some(limits), Ok(report)) = (self.limits.as_mut(), &raw[0]) {
                    let op = format!("op {n}");
                    let limit = request.requeue_limit;
                    limits.swept(&op, &partition, request.now_ms, limit, &report.requeued);
                }
                (
                    what,
                    self.pair(raw, |_, r| Answer::Look(res(r, |report| report))),
                )
            }
            Op::PeekWindow {
                at,
                from,
                to,
                limit,
            } => {
                let partition = self.partition(at);
                let (from, to) = (due_ms(Due::Slot(from)), due_ms(Due::Slot(to)));
                let raw = each!(self, |store, side| store
                    .peek_window(&partition, from, to, usize::from(limit))
                    .await);
                let what = format!(
                    "peek_window {partition} {}..={} limit {limit}",
                    t(from),
                    t(to)
                );
                (what, self.pair(raw, |_, r| Answer::Window(res(r, |w| w))))
            }
            Op::RetryDead { task, due } => {
                let (partition, id) = self.task(task);
                let due = due_ms(due);
                let raw = each!(self, |store, side| store
                    .retry_dead(&partition, &id, due)
                    .await);
                let what = format!("retry_dead {partition} {id} at {}", t(due));
                (what, self.pair(raw, |_, r| Answer::Revived(res(r, |b| b))))
            }
            Op::PurgeDeadOne { task } => {
                let (partition, id) = self.task(task);
                let raw = each!(self, |store, side| store
                    .purge_dead(&partition, Some(&id))
                    .await);
                let what = format!("purge_dead {partition} {id}");
                (what, self.pair(raw, |_, r| Answer::Count(res(r, |n| n))))
            }
            Op::PurgeDeadAll { at } => {
                let partition = self.partition(at);
                let raw = each!(self, |store, side| store.purge_dead(&partition, None).await);
                let what = format!("purge_dead {partition} all");
                (what, self.pair(raw, |_, r| Answer::Count(res(r, |n| n))))
            }
            Op::PruneDone { at, before, limit } => {
                let partition = self.partition(at);
                let (op, cutoff) = self.cutoff(before);
                let raw = each!(self, |store, side| store
                    .prune_done(&partition, cutoff, usize::from(limit))
                    .await);
                let what = format!("prune_done {partition} before op {op} limit {limit}");
                (what, self.pair(raw, |_, r| Answer::Count(res(r, |n| n))))
            }
            Op::Stats { at } => {
                let partition = self.partition(at);
                let answers = self.stats(&partition).await;
                (format!("stats {partition} at {}", t(self.now_ms)), answers)
            }
            Op::ListDead { at, limit } => {
                let partition = self.partition(at);
                let answers = self.list_dead(&partition, usize::from(limit)).await;
                (format!("list_dead {partition} limit {limit}"), answers)
            }
            Op::PeekDead { at, limit } => {
                let partition = self.partition(at);
                let answers = self.peek_dead(&partition, usize::from(limit)).await;
                (format!("peek_dead {partition} limit {limit}"), answers)
            }
            Op::SetPaused { queue, paused } => {
                let (queue, partitions) = self.queue(queue);
                let raw = each!(self, |store, side| store
                    .set_paused(&queue, partitions, paused)
                    .await);
                settle().await;
                let what = format!("set_paused {queue} {paused}");
                (what, self.pair(raw, |_, r| Answer::Paused(res(r, |o| o))))
            }
            Op::Register { queue, partitions } => {
                let (queue, _) = self.queue(queue);
                let partitions = u32::from(partitions);
                let raw = each!(self, |store, side| store
                    .register_queue(&queue, partitions)
                    .await);
                let what = format!("register {queue} with {partitions} partitions");
                (
                    what,
                    self.pair(raw, |_, r| Answer::Registered(res(r, |n| n))),
                )
            }
        }
    }

    /// `schedule` of `task` on both stores, described as `verb`.
    async fn schedule(
        &mut self,
        verb: &str,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> (String, [Answer; 2]) {
        let what = format!(
            "{verb} {partition} {} due {} payload {}B mode {mode}",
            task.id,
            t(task.due_ms),
            task.payload.len()
        );
        let raw = each!(self, |store, side| store
            .schedule(partition, task.clone(), mode)
            .await);
        if let (Some(limits), Ok(ScheduleOutcome::Replaced { .. })) =
            (self.limits.as_mut(), &raw[0])
        {
            limits.replaced(partition, &task.id);
        }
        let answers = self.pair(raw, |_, r| Answer::Scheduled(res(r, |o| o)));
        (what, answers)
    }

    /// `claim_due` of up to `limit` tasks of `partition` at `now` by `owner`, with a lease of
    /// `lease_slots` (operation `n`): the tasks' leases are kept, their claims checked
    /// against the per-key limits; returns the indexes of the new leases too.
    pub(super) async fn claim(
        &mut self,
        n: usize,
        partition: &Partition,
        limit: usize,
        lease_slots: u8,
        owner: &'static str,
    ) -> (String, [Answer; 2], Vec<usize>) {
        let now_ms = self.now_ms;
        let deadline_ms = now_ms + u64::from(lease_slots) * SLOT;
        let what = format!(
            "claim {partition} at {} limit {limit} lease until {} by {owner}",
            t(now_ms),
            t(deadline_ms)
        );
        let raw = each!(self, |store, side| store
            .claim_due(partition, now_ms, limit, deadline_ms, owner)
            .await);
        let mut leases = Vec::new();
        if let [Ok(real), Ok(memory)] = &raw {
            if !real.tasks.is_empty() || !memory.tasks.is_empty() {
                let claimed_at = self.checkpoints.start_of(n);
                self.receipts.insert(partition.clone(), claimed_at);
            }
            for (r, m) in real.tasks.iter().zip(&memory.tasks) {
                let index = self.leases.len();
                leases.push(index);
                self.leases.push(Lease {
                    partition: partition.clone(),
                    owner,
                    deadline_ms,
                    op: n,
                    tokens: [r.token.clone(), m.token.clone()],
                });
                if let Some(limits) = self.limits.as_mut() {
                    let op = format!("op {n}");
                    limits.claimed(
                        &op,
                        partition,
                        &r.id,
                        r.generation,
                        index,
                        deadline_ms,
                        now_ms,
                    );
                }
            }
        }
        let answers = self.pair(raw, |norm, r| {
            Answer::Claim(res(r, |batch| norm.batch(partition, &batch)))
        });
        (what, answers, leases)
    }

    /// `ack` of the lease of index `index` on both stores, its report given to the account.
    pub(super) async fn ack_lease(&mut self, index: usize) -> [Answer; 2] {
        let held = &self.leases[index];
        let (partition, tokens) = (held.partition.clone(), held.tokens.clone());
        let raw = each!(self, |store, side| store.ack(&tokens[side]).await);
        settle().await;
        if let Some(limits) = self.limits.as_mut() {
            let report = match &raw[0] {
                Ok(AckOutcome::Completed) => Report::Completed,
                Ok(AckOutcome::Superseded) => Report::Superseded,
                Err(_) => Report::Stale,
            };
            limits.reported(&partition, &tokens[0].id, index, report);
        }
        self.pair(raw, |_, r| Answer::Acked(res(r, |o| o)))
    }

    /// `requeue_expired` of up to `limit` leases of `partition` at `now` (operation `n`).
    pub(super) async fn requeue_expired(
        &mut self,
        n: usize,
        partition: &Partition,
        limit: usize,
    ) -> (String, [Answer; 2]) {
        let now_ms = self.now_ms;
        let raw = each!(self, |store, side| store
            .requeue_expired(partition, now_ms, limit)
            .await);
        if let (Some(limits), Ok(requeued)) = (self.limits.as_mut(), &raw[0]) {
            limits.swept(&format!("op {n}"), partition, now_ms, limit, requeued);
        }
        let what = format!("requeue_expired {partition} at {} limit {limit}", t(now_ms));
        (
            what,
            self.pair(raw, |_, r| Answer::Requeued(res(r, |ids| ids))),
        )
    }

    fn skipped() -> [Answer; 2] {
        [Answer::Skipped, Answer::Skipped]
    }

    pub(super) fn describe(lease: &Lease) -> String {
        format!(
            "{} {} (claimed in op {} by {}, lease until {})",
            lease.partition,
            lease.tokens[0].id,
            lease.op,
            lease.owner,
            t(lease.deadline_ms)
        )
    }
}
