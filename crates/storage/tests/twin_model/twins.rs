//! The two stores side by side: every operation goes to the real store (Redis or
//! PostgreSQL), then to the memory store, with the same arguments and the same explicit times,
//! and both answers come back normalised ([`Step`]).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use delayq_storage::{
    FlowLimits, LeaseToken, MemoryStore, NewTask, Partition, QueueLayout, QueueName, TaskId,
    TaskStore, MAX_DUE_MS,
};

use crate::limits::KeyLimits;
use crate::normal::{res, Answer, Checkpoints, Generations, Normaliser};
use crate::ops::{Due, Target, TaskRef, TaskSpec, Universe, BASE, PAYLOADS, SLOT, START_SLOT};

/// The most records a read of the final state asks for (more than a case can make).
const ALL: usize = 1_000;

/// How long after a claim its receipt is surely still there on Redis, in wall-clock ms. The
/// Redis backend keeps a claim's receipt for `max(lease, 1 s)` of Redis `TIME` (every lease
/// of the model is at most 1 s), the memory backend until the next claim of the partition;
/// `recover_claim` is only compared within this bound, so that a slow case on a loaded machine
/// does not see that difference (which only shows after the lease).
const RECEIPT_FRESH_MS: u64 = 500;

/// One operation as both stores answered it.
pub struct Step {
    /// The operation with its arguments resolved, for the transcript.
    pub what: String,
    /// The real store's answer.
    pub real: Answer,
    /// The memory store's answer.
    pub memory: Answer,
}

impl Step {
    fn new(what: String, [real, memory]: [Answer; 2]) -> Self {
        Step { what, real, memory }
    }
}

/// A lease handed out by a claim: the same task's token from each store.
struct Lease {
    partition: Partition,
    owner: &'static str,
    deadline_ms: u64,
    /// The operation that claimed it.
    op: usize,
    tokens: [LeaseToken; 2],
}

/// The real store (first) and the memory store (second), and what the runner knows of the case.
pub struct Twins {
    real: Box<dyn TaskStore>,
    memory: MemoryStore,
    /// The names of the two sides, for messages: the real backend's, then `memory`.
    sides: [&'static str; 2],
    queues: Vec<(QueueName, u32)>,
    /// The task ids of every queue.
    ids: &'static [&'static str],
    /// The per-key limits of every queue, registered with flow keys (else `None`: no flow
    /// keys).
    flow: Option<FlowLimits>,
    /// With flow keys, the account of the holds and the bounds broken.
    limits: Option<KeyLimits>,
    /// The logical `now` every timed call gets.
    now_ms: u64,
    leases: Vec<Lease>,
    /// The due each task was last scheduled with (what a resend sends again).
    scheduled: HashMap<(QueueName, TaskId), u64>,
    /// The tasks scheduled, oldest first.
    recent: Vec<(Partition, TaskId)>,
    /// When (wall clock) each partition's latest claim that took tasks began: its receipt.
    receipts: HashMap<Partition, u64>,
    generations: [Generations; 2],
    checkpoints: Checkpoints,
}

/// Runs `$body` with `$store` bound to each store (the real one first) and `$side` to its
/// index, and returns both results.
macro_rules! each {
    ($twins:expr, |$store:ident, $side:ident| $body:expr) => {{
        let real = {
            let $side: usize = 0;
            let _ = $side;
            let $store: &dyn TaskStore = &*$twins.real;
            $body
        };
        let memory = {
            let $side: usize = 1;
            let _ = $side;
            let $store: &dyn TaskStore = &$twins.memory;
            $body
        };
        [real, memory]
    }};
}

mod apply;
mod drain;

pub use self::drain::ROUNDS;

/// The wall clock in ms: what both stores stamp with (Redis `TIME` is the same clock).
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

/// Waits until the wall clock is 2 ms past now, so that whatever the last operation stamped
/// is strictly before the next operation's checkpoint.
async fn settle() {
    let until = wall_ms() + 2;
    while wall_ms() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn due_ms(due: Due) -> u64 {
    match due {
        Due::Slot(slot) => BASE + u64::from(slot) * SLOT,
        Due::Invalid => MAX_DUE_MS + 1,
    }
}

/// A logical time as the transcript shows it: `T+30` is `BASE + 30 ms`.
fn t(ms: u64) -> String {
    match ms.checked_sub(BASE) {
        Some(offset) if offset < 1_000_000_000 => format!("T+{offset}"),
        _ => ms.to_string(),
    }
}

impl Twins {
    /// Both stores, fresh and empty, with the universe's queues not yet registered; `name`
    /// names the real one in messages.
    pub fn new(
        name: &'static str,
        real: Box<dyn TaskStore>,
        memory: MemoryStore,
        universe: &Universe,
    ) -> Self {
        let queues = universe
            .partitions
            .iter()
            .enumerate()
            .map(|(n, &partitions)| {
                let queue = QueueName::new(format!("q{n}")).expect("a valid queue name");
                (queue, partitions)
            })
            .collect();
        Twins {
            real,
            memory,
            sides: [name, "memory"],
            queues,
            ids: universe.ids(),
            flow: universe.flow,
            limits: universe.flow.map(KeyLimits::new),
            now_ms: BASE + START_SLOT * SLOT,
            leases: Vec::new(),
            scheduled: HashMap::new(),
            recent: Vec::new(),
            receipts: HashMap::new(),
            generations: Default::default(),
            checkpoints: Checkpoints::default(),
        }
    }

    /// Notes the wall clock at the start of the next operation.
    pub fn begin(&mut self) {
        self.checkpoints.push(wall_ms());
    }

    /// Generations that went back, per store (a defect of that store alone), and the
    /// per-key bounds broken (the stores agreed, so both broke them).
    pub fn violations(&self) -> Vec<String> {
        let generations =
            self.sides
                .iter()
                .zip(&self.generations)
                .flat_map(|(side, generations)| {
                    generations
                        .violations
                        .iter()
                        .map(move |violation| format!("{side}: {violation}"))
                });
        let limits = self
            .limits
            .iter()
            .flat_map(|limits| limits.violations.iter().map(|v| format!("both: {v}")));
        generations.chain(limits).collect()
    }

    fn normaliser(&mut self, side: usize) -> Normaliser<'_> {
        Normaliser {
            generations: &mut self.generations[side],
            checkpoints: &self.checkpoints,
        }
    }

    /// Both raw answers, normalised by `f` with each store's normaliser.
    fn pair<T>(
        &mut self,
        raw: [T; 2],
        f: impl Fn(&mut Normaliser<'_>, T) -> Answer,
    ) -> [Answer; 2] {
        let [real, memory] = raw;
        let real = f(&mut self.normaliser(0), real);
        let memory = f(&mut self.normaliser(1), memory);
        [real, memory]
    }

    fn queue(&self, queue: u8) -> (QueueName, u32) {
        self.queues[usize::from(queue) % self.queues.len()].clone()
    }

    fn id(&self, id: u8) -> TaskId {
        TaskId::new(self.ids[usize::from(id) % self.ids.len()]).expect("a valid id")
    }

    /// How `queue`'s ids map to its `partitions`.
    fn layout(&self, partitions: u32) -> QueueLayout {
        QueueLayout {
            partitions,
            flow_keys: self.flow.is_some(),
        }
    }

    /// The partition `id` routes to in `queue`, and the id.
    fn task_at(&self, queue: u8, id: u8) -> (Partition, TaskId) {
        let (queue, partitions) = self.queue(queue);
        let id = self.id(id);
        let index = self.layout(partitions).partition_of(&id);
        (Partition::new(queue, index), id)
    }

    fn partition(&self, at: Target) -> Partition {
        match at {
            Target::OfId { queue, id } => self.task_at(queue, id).0,
            Target::Index { queue, index } => {
                let (queue, partitions) = self.queue(queue);
                Partition::new(queue, u32::from(index) % partitions)
            }
            Target::OfLease(lease) => match self.lease(lease) {
                Some(held) => held.partition.clone(),
                None => Partition::new(self.queue(0).0, 0),
            },
            Target::Recent(back) => self.task(TaskRef::Recent(back)).0,
        }
    }

    fn task(&self, task: TaskRef) -> (Partition, TaskId) {
        match task {
            TaskRef::Id { queue, id } => self.task_at(queue, id),
            TaskRef::OfLease(lease) => match self.lease(lease) {
                Some(held) => (held.partition.clone(), held.tokens[0].id.clone()),
                None => self.task_at(0, 0),
            },
            TaskRef::Recent(back) => match self.recent.len() {
                0 => self.task_at(0, 0),
                len => self.recent[len - 1 - usize::from(back) % len].clone(),
            },
        }
    }

    /// Whether `partition`'s latest receipt (if any) is surely still kept by Redis.
    fn receipt_is_fresh(&self, partition: &Partition) -> bool {
        self.receipts
            .get(partition)
            .is_none_or(|&claimed_at| wall_ms() < claimed_at + RECEIPT_FRESH_MS)
    }

    /// Notes the due a producer last asked for, for a resend.
    fn note_scheduled(&mut self, partition: &Partition, task: &NewTask) {
        let key = (partition.queue.clone(), task.id.clone());
        self.scheduled.insert(key, task.due_ms);
        self.recent.push((partition.clone(), task.id.clone()));
    }

    fn new_task(&self, queue: u8, spec: TaskSpec) -> (Partition, NewTask) {
        let (partition, id) = self.task_at(queue, spec.id);
        let payload = PAYLOADS[usize::from(spec.payload) % PAYLOADS.len()];
        let task = NewTask {
            id,
            due_ms: due_ms(spec.due),
            payload: Bytes::from_static(payload.as_bytes()),
            traceparent: None,
        };
        (partition, task)
    }

    fn lease(&self, lease: u8) -> Option<&Lease> {
        match self.leases.len() {
            0 => None,
            held => self.leases.get(usize::from(lease) % held),
        }
    }

    /// The wall-clock start of operation `before` modulo the operations begun so far.
    fn cutoff(&self, before: u8) -> (usize, u64) {
        let op = usize::from(before) % self.checkpoints.len();
        (op, self.checkpoints.start_of(op))
    }

    /// Registers every queue of the universe in both stores (with flow keys and the per-key
    /// limits, when the universe has them).
    pub async fn setup(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        for (queue, partitions) in self.queues.clone() {
            let Some(limits) = self.flow else {
                let raw = each!(self, |store, side| store
                    .register_queue(&queue, partitions)
                    .await);
                let answers = self.pair(raw, |_, r| Answer::Registered(res(r, |n| n)));
                let what = format!("register {queue} with {partitions} partitions");
                steps.push(Step::new(what, answers));
                continue;
            };
            let raw = each!(self, |store, side| store
                .register_layout(&queue, partitions, Some(true))
                .await);
            let answers = self.pair(raw, |_, r| Answer::Layout(res(r, |layout| layout)));
            let what = format!("register {queue} with {partitions} partitions and flow keys");
            steps.push(Step::new(what, answers));
            let raw = each!(self, |store, side| store
                .set_flow_limits(&queue, limits)
                .await);
            let answers = self.pair(raw, |_, r| Answer::Limits(res(r, |o| o)));
            steps.push(Step::new(
                format!("set_flow_limits {queue} {limits:?}"),
                answers,
            ));
        }
        steps
    }

    /// Both stores' held keys of `partition`, checked against the account (`when` says
    /// where in the case).
    async fn held_keys(&mut self, when: &str, partition: &Partition) -> [Answer; 2] {
        let raw = each!(self, |store, side| store.held_keys(partition, ALL).await);
        if let (Some(limits), Ok(held)) = (self.limits.as_mut(), &raw[0]) {
            limits.compare_held(when, partition, held);
        }
        self.pair(raw, |_, r| Answer::HeldKeys(res(r, |held| held)))
    }

    async fn get(&mut self, partition: &Partition, id: &TaskId) -> [Answer; 2] {
        let raw = each!(self, |store, side| store.get(partition, id).await);
        self.pair(raw, |norm, r| {
            Answer::Task(res(r, |info| {
                info.map(|info| norm.info(&partition.queue, info))
            }))
        })
    }

    async fn stats(&mut self, partition: &Partition) -> [Answer; 2] {
        let now_ms = self.now_ms;
        let raw = each!(self, |store, side| store.stats(partition, now_ms).await);
        self.pair(raw, |_, r| Answer::Stats(res(r, |s| s)))
    }

    async fn list_dead(&mut self, partition: &Partition, limit: usize) -> [Answer; 2] {
        let raw = each!(self, |store, side| store.list_dead(partition, limit).await);
        self.pair(raw, |norm, r| Answer::Dead(res(r, |dead| norm.dead(dead))))
    }

    async fn peek_dead(&mut self, partition: &Partition, limit: usize) -> [Answer; 2] {
        let raw = each!(self, |store, side| store.peek_dead(partition, limit).await);
        self.pair(raw, |norm, r| {
            Answer::DeadIds(res(r, |ids| norm.stamped(ids)))
        })
    }

    /// Reads everything both stores hold: the registry, the paused queues, and per partition
    /// its counts, pending tasks and dead letters, and every id's `get`.
    pub async fn final_state(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        let raw = each!(self, |store, side| store.queues().await);
        let answers = self.pair(raw, |_, r| Answer::Queues(res(r, |q| q)));
        steps.push(Step::new("queues".to_owned(), answers));
        let raw = each!(self, |store, side| store.paused_queues().await);
        let answers = self.pair(raw, |norm, r| {
            Answer::PausedQueues(res(r, |queues| norm.stamped(queues)))
        });
        steps.push(Step::new("paused_queues".to_owned(), answers));
        for (queue, partitions) in self.queues.clone() {
            for index in 0..partitions {
                let partition = Partition::new(queue.clone(), index);
                let answers = self.stats(&partition).await;
                let what = format!("stats {partition} at {}", t(self.now_ms));
                steps.push(Step::new(what, answers));
                let raw = each!(self, |store, side| store
                    .peek_window(&partition, 0, MAX_DUE_MS, ALL)
                    .await);
                let answers = self.pair(raw, |_, r| Answer::Window(res(r, |w| w)));
                steps.push(Step::new(format!("pending of {partition}"), answers));
                let answers = self.list_dead(&partition, ALL).await;
                steps.push(Step::new(format!("list_dead {partition}"), answers));
                let answers = self.peek_dead(&partition, ALL).await;
                steps.push(Step::new(format!("peek_dead {partition}"), answers));
                if self.flow.is_some() {
                    let answers = self.held_keys("final state", &partition).await;
                    steps.push(Step::new(format!("held_keys {partition}"), answers));
                }
            }
            for name in self.ids {
                let id = TaskId::new(*name).expect("a valid id");
                let index = self.layout(partitions).partition_of(&id);
                let partition = Partition::new(queue.clone(), index);
                let answers = self.get(&partition, &id).await;
                steps.push(Step::new(format!("get {partition} {id}"), answers));
            }
        }
        steps
    }
}
