//! Answers in a form both backends must agree on exactly.
//!
//! Three things are legitimately backend-specific, and only these are normalised:
//!
//! 1. **Generations** are Redis `TIME` in µs (+1 per schedule) on Redis and a per-partition
//!    counter in memory. What the contract fixes is when an id's generation changes (a new
//!    schedule, a new life after a cancel) and that it never goes back, so each backend's
//!    generations of an id are numbered in the order they are first seen ([`Gen::Life`]),
//!    after checking that a new one is larger than every earlier one. Generation 0 (a task
//!    cancelled while its handler runs) stays [`Gen::Cancelled`].
//! 2. **Claim numbers** (the fencing part of a lease token) are Redis `TIME` in µs on Redis and
//!    the same counter in memory: never compared; the rest of each token is checked against
//!    the task it came with ([`Claimed::token_matches`]).
//! 3. **Stamps the store takes itself** (`completed_ms`, `failed_ms`, paused-since) come from
//!    Redis `TIME` and the memory store's system clock: both the machine's wall clock, but not
//!    the same millisecond. The runner notes the wall clock before each operation and waits
//!    2 ms after each one that can stamp, so a stamp is replaced by the operation it was taken
//!    in ([`Stamp::Op`]): both stores must stamp in the same operation.
//!
//! Errors are compared by their `Debug` text (variant and every field).

use std::collections::HashMap;
use std::fmt::Debug;

use bytes::Bytes;
use delayq_storage::{
    AckOutcome, Cancel, ClaimBatch, DeadTask, FailOutcome, HeldKey, LookReport, Partition,
    PartitionStats, QueueLayout, QueueName, ScheduleOutcome, StorageResult, TaskId, TaskInfo,
    TaskState,
};

/// A result with the error as its `Debug` text.
pub type Res<T> = Result<T, String>;

/// `result` with its error as text, its value mapped by `f`.
pub fn res<T, U>(result: StorageResult<T>, f: impl FnOnce(T) -> U) -> Res<U> {
    result.map(f).map_err(|error| format!("{error:?}"))
}

/// A generation, numbered per id in the order first seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gen {
    /// Generation 0: cancelled while its handler runs.
    Cancelled,
    /// The n-th distinct generation seen for the id (from 0).
    Life(usize),
}

/// One backend's generations seen so far, per id.
#[derive(Default)]
pub struct Generations {
    seen: HashMap<(QueueName, TaskId), Vec<u64>>,
    /// A generation that went back: a defect of that backend on its own.
    pub violations: Vec<String>,
}

impl Generations {
    /// The normal form of `raw`, a generation of `id` in `queue`.
    pub fn of(&mut self, queue: &QueueName, id: &TaskId, raw: u64) -> Gen {
        if raw == 0 {
            return Gen::Cancelled;
        }
        let seen = self.seen.entry((queue.clone(), id.clone())).or_default();
        if let Some(n) = seen.iter().position(|&g| g == raw) {
            return Gen::Life(n);
        }
        if let Some(&latest) = seen.iter().max() {
            if raw < latest {
                self.violations.push(format!(
                    "generation of {queue}/{id} went back from {latest} to {raw}"
                ));
            }
        }
        seen.push(raw);
        Gen::Life(seen.len() - 1)
    }
}

/// A time the store stamped itself, as the operation it was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// Taken during operation n (or, for n = the number of operations, after the last one).
    Op(usize),
    /// Earlier than the first operation.
    BeforeStart,
}

/// The wall-clock time (ms) noted before each operation.
#[derive(Default)]
pub struct Checkpoints {
    starts: Vec<u64>,
}

impl Checkpoints {
    /// Notes the start of the next operation.
    pub fn push(&mut self, wall_ms: u64) {
        self.starts.push(wall_ms);
    }

    /// The start of operation `n`.
    pub fn start_of(&self, n: usize) -> u64 {
        self.starts[n]
    }

    /// The number of operations started.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// The operation `stamp_ms` was taken in.
    pub fn stamp(&self, stamp_ms: u64) -> Stamp {
        match self.starts.partition_point(|&start| start <= stamp_ms) {
            0 => Stamp::BeforeStart,
            n => Stamp::Op(n - 1),
        }
    }
}

/// What `state_since_ms` holds, by state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// Pending: nothing.
    Nothing,
    /// In flight: the lease deadline (a logical time, compared as it is).
    Lease(u64),
    /// Dead or done: when, as the operation that stamped it.
    Stamped(Stamp),
    /// A state whose `state_since_ms` is not the contract's (pending with one, or another
    /// without): kept raw so that it shows.
    Odd(Option<u64>),
}

/// A task as `get` reports it, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub state: TaskState,
    pub due_ms: u64,
    pub attempt: u32,
    pub generation: Gen,
    pub payload: Bytes,
    pub last_error: Option<String>,
    pub since: Since,
}

/// A claimed task, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub id: TaskId,
    pub due_ms: u64,
    pub attempt: u32,
    pub generation: Gen,
    pub payload: Bytes,
    /// Whether the token names this task's partition, id and generation.
    pub token_matches: bool,
}

/// A claim's answer, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub tasks: Vec<Claimed>,
    pub next_due_ms: Option<u64>,
    pub dead_lettered: Vec<(TaskId, String)>,
    pub paused: bool,
}

/// A dead letter, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dead {
    pub id: TaskId,
    pub due_ms: u64,
    pub attempt: u32,
    pub failed: Stamp,
    pub last_error: Option<String>,
    pub payload: Bytes,
}

/// One operation's answer, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The operation needed a lease and none was handed out yet.
    Skipped,
    Registered(Res<u32>),
    Layout(Res<QueueLayout>),
    Limits(Res<()>),
    HeldKeys(Res<Vec<HeldKey>>),
    Scheduled(Res<ScheduleOutcome>),
    ScheduledMany(Res<Vec<Res<ScheduleOutcome>>>),
    Cancelled(Res<Cancel>),
    Task(Res<Option<Info>>),
    Claim(Res<Batch>),
    Acked(Res<AckOutcome>),
    Failed(Res<FailOutcome>),
    Renewed(Res<()>),
    Advanced(u64),
    Requeued(Res<Vec<TaskId>>),
    Look(Res<LookReport>),
    Window(Res<Vec<(TaskId, u64)>>),
    Revived(Res<bool>),
    Count(Res<u64>),
    Stats(Res<PartitionStats>),
    Dead(Res<Vec<Dead>>),
    DeadIds(Res<Vec<(TaskId, Stamp)>>),
    Paused(Res<()>),
    Queues(Res<Vec<(QueueName, u32)>>),
    PausedQueues(Res<Vec<(QueueName, Stamp)>>),
}

/// How one backend's raw answers become [`Answer`]s: its generations and the checkpoints.
pub struct Normaliser<'a> {
    pub generations: &'a mut Generations,
    pub checkpoints: &'a Checkpoints,
}

impl Normaliser<'_> {
    /// A `get` answer.
    pub fn info(&mut self, queue: &QueueName, info: TaskInfo) -> Info {
        let since = match (info.state, info.state_since_ms) {
            (TaskState::Pending, None) => Since::Nothing,
            (TaskState::Inflight, Some(deadline)) => Since::Lease(deadline),
            (TaskState::Dead | TaskState::Done, Some(stamp)) => {
                Since::Stamped(self.checkpoints.stamp(stamp))
            }
            (_, raw) => Since::Odd(raw),
        };
        Info {
            state: info.state,
            due_ms: info.due_ms,
            attempt: info.attempt,
            generation: self.generations.of(queue, &info.id, info.generation),
            payload: info.payload,
            last_error: info.last_error,
            since,
        }
    }

    /// A claim's (or a recovered claim's) answer.
    pub fn batch(&mut self, partition: &Partition, batch: &ClaimBatch) -> Batch {
        let tasks = batch
            .tasks
            .iter()
            .map(|task| Claimed {
                id: task.id.clone(),
                due_ms: task.due_ms,
                attempt: task.attempt,
                generation: self
                    .generations
                    .of(&partition.queue, &task.id, task.generation),
                payload: task.payload.clone(),
                token_matches: task.token.partition == *partition
                    && task.token.id == task.id
                    && task.token.generation == task.generation,
            })
            .collect();
        Batch {
            tasks,
            next_due_ms: batch.next_due_ms,
            dead_lettered: batch.dead_lettered.clone(),
            paused: batch.paused,
        }
    }

    /// A `list_dead` answer.
    pub fn dead(&self, dead: Vec<DeadTask>) -> Vec<Dead> {
        dead.into_iter()
            .map(|task| Dead {
                id: task.id,
                due_ms: task.due_ms,
                attempt: task.attempt,
                failed: self.checkpoints.stamp(task.failed_ms),
                last_error: task.last_error,
                payload: task.payload,
            })
            .collect()
    }

    /// `(name, stamp)` pairs with the stamps normalised.
    pub fn stamped<T>(&self, pairs: Vec<(T, u64)>) -> Vec<(T, Stamp)> {
        pairs
            .into_iter()
            .map(|(name, stamp)| (name, self.checkpoints.stamp(stamp)))
            .collect()
    }
}

impl Answer {
    /// What this answer shows happened, for the run's coverage summary: the outcomes the
    /// model exists to compare (a claim that took tasks, a superseded ack, a stale lease, ...).
    pub fn coverage(&self) -> Vec<String> {
        fn error(error: &str) -> String {
            let variant = error.split([' ', '{', '(']).next().unwrap_or(error);
            format!("error {variant}")
        }
        fn outcome<T: Debug>(name: &str, result: &Res<T>) -> String {
            match result {
                Ok(value) => {
                    let shown = format!("{value:?}").replace("()", "ok");
                    let variant = shown.split([' ', '{', '(']).next().unwrap_or(&shown);
                    format!("{name} {variant}")
                }
                Err(text) => format!("{name} {}", error(text)),
            }
        }
        match self {
            Answer::Scheduled(result) => vec![outcome("schedule", result)],
            Answer::ScheduledMany(Ok(items)) => items
                .iter()
                .map(|item| outcome("schedule_many item", item))
                .collect(),
            Answer::Cancelled(result) => vec![outcome("cancel", result)],
            Answer::Acked(result) => vec![outcome("ack", result)],
            Answer::Failed(result) => vec![outcome("fail", result)],
            Answer::Renewed(result) => vec![outcome("renew", result)],
            Answer::Registered(result) => vec![outcome("register", result)],
            Answer::HeldKeys(Ok(held)) if !held.is_empty() => vec!["held_keys some".to_owned()],
            Answer::Stats(Ok(stats)) if stats.held_back > 0 => vec!["stats held back".to_owned()],
            Answer::Task(Ok(Some(info))) => vec![format!("get {:?}", info.state)],
            Answer::Claim(Ok(batch)) if batch.paused => vec!["claim paused".to_owned()],
            Answer::Claim(Ok(batch)) => vec![match batch.tasks.len() {
                0 => "claim nothing".to_owned(),
                1 => "claim one task".to_owned(),
                _ => "claim several tasks".to_owned(),
            }],
            Answer::Requeued(Ok(ids)) if !ids.is_empty() => vec!["requeue some".to_owned()],
            Answer::Look(Ok(report)) if !report.requeued.is_empty() => {
                vec!["look requeued some".to_owned()]
            }
            Answer::Look(Ok(report)) if report.pruned > 0 => vec!["look pruned some".to_owned()],
            Answer::Revived(Ok(true)) => vec!["retry_dead revived".to_owned()],
            Answer::Dead(Ok(dead)) if !dead.is_empty() => vec!["list_dead some".to_owned()],
            Answer::Count(Ok(n)) if *n > 0 => vec!["purge or prune removed some".to_owned()],
            _ => Vec::new(),
        }
    }
}
