//! What handlers receive and what producers get back.

use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;

/// A task handed to a handler.
///
/// Delivery is at-least-once: a handler that wants exactly-once effects uses
/// [`Task::idempotency_key`] (`queue`, `id`, `generation`) to recognise a repeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The queue.
    pub queue: String,
    /// The task's id inside its queue.
    pub id: String,
    /// When it was due, in cluster milliseconds.
    pub due_ms: u64,
    /// When it was handed to the handler, in cluster milliseconds.
    pub fired_ms: u64,
    /// 1 on the first delivery, +1 on each retry.
    pub attempt: u32,
    /// Bumped each time the id is scheduled again.
    pub generation: u64,
    /// The payload as scheduled.
    pub payload: Bytes,
    /// The id of the node running it.
    pub node: String,
}

impl Task {
    /// The payload decoded from JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }

    /// How late the task fired (`fired - due`), zero when on time.
    pub fn lateness(&self) -> Duration {
        Duration::from_millis(self.fired_ms.saturating_sub(self.due_ms))
    }

    /// `queue/id/generation`: the same for every delivery of one schedule of the task.
    pub fn idempotency_key(&self) -> String {
        format!("{}/{}/{}", self.queue, self.id, self.generation)
    }
}

/// When a task is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// This long from now on the cluster clock.
    In(Duration),
    /// At this time: milliseconds since the Unix epoch on the cluster clock.
    At(u64),
}

impl When {
    /// The due time in cluster milliseconds, given the cluster's `now_ms`.
    pub fn due_ms(&self, now_ms: u64) -> u64 {
        match *self {
            When::In(delay) => {
                now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
            }
            When::At(due_ms) => due_ms,
        }
    }
}

/// What a schedule did, as `delayq schedule` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Scheduled {
    /// The queue.
    pub queue: String,
    /// The task's id.
    pub id: String,
    /// Its due time in cluster milliseconds.
    pub due_ms: u64,
    /// A live task with this id was replaced.
    pub replaced: bool,
    /// The same id and due already fired within the retention: nothing was scheduled.
    pub duplicate: bool,
    /// The mode (`if_absent`, `earlier`, `later`) kept the live task that was there; its due
    /// is in `due_ms`.
    pub kept: bool,
}
