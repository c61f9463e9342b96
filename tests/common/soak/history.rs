//! The recorded history of a soak run: every producer operation with its answer, every fire
//! as the harness received it, every fault with its interval. Everything is stamped by the
//! harness ([`Stamp`]): the wall clock (the machine's `CLOCK_REALTIME`, the clock Redis `TIME`
//! reads on the same machine, and the clock the producers compute their dues from) and a
//! monotonic clock since the run began (to see whether the wall clock was stepped).
//!
//! The history is plain data (serde), saved as one JSON document, so a run can be checked
//! again offline (`DELAYQ_SOAK_RECHECK=<file>`).

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A harness-side time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Milliseconds since the Unix epoch on this machine's clock.
    pub wall_ms: u64,
    /// Milliseconds since the run's start on the monotonic clock.
    pub mono_ms: u64,
}

/// Reads both clocks relative to one start.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose monotonic zero is now.
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    /// Now on both clocks.
    pub fn now(&self) -> Stamp {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|since| since.as_millis() as u64)
            .unwrap_or(0);
        Stamp {
            wall_ms,
            mono_ms: self.start.elapsed().as_millis() as u64,
        }
    }
}

/// What a producer asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// `PUT` of an id with no task of this producer's (a new key, or a new life after the
    /// key fired or was cancelled).
    Schedule,
    /// `PUT` of an id whose last operation was a schedule, with a new due (replace mode).
    Replace,
    /// `PUT` of an id with the due of its last schedule again (a producer's resend).
    Resend,
    /// `DELETE` of the id.
    Cancel,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [OpKind; 4] = [
        OpKind::Schedule,
        OpKind::Replace,
        OpKind::Resend,
        OpKind::Cancel,
    ];

    /// The kind's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Schedule => "schedule",
            OpKind::Replace => "replace",
            OpKind::Resend => "resend",
            OpKind::Cancel => "cancel",
        }
    }
}

/// The answer the producer got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// 200 to a `PUT`: `{"due_ms","replaced","duplicate","kept"}`.
    Scheduled {
        /// `due_ms` of the answer.
        due_ms: u64,
        /// A live task was replaced.
        replaced: bool,
        /// The same id and due already fired (guarantee 6): nothing stored.
        duplicate: bool,
        /// The mode kept the live task (never with `replace`, which the producers use).
        kept: bool,
    },
    /// 200 to a `DELETE`: `{"cancelled"}` plus `"state":"inflight"`.
    Cancelled {
        /// A fire was prevented (guarantee 7).
        cancelled: bool,
        /// The handler runs and cannot be un-run.
        inflight: bool,
    },
    /// A 4xx: the request was refused, nothing was applied.
    Refused {
        /// The status.
        status: u16,
        /// The body.
        error: String,
    },
    /// No answer (connection error, timeout) or a 5xx: the operation may have been applied,
    /// now or at any later time (a request held by a stopped node, a script held by a
    /// blackholed connection).
    Unknown {
        /// What the client saw.
        error: String,
    },
}

impl Answer {
    /// Whether the answer says what happened (2xx).
    pub fn is_definite(&self) -> bool {
        matches!(self, Answer::Scheduled { .. } | Answer::Cancelled { .. })
    }

    /// A short name of the answer for the counts.
    pub fn class(&self) -> &'static str {
        match self {
            Answer::Scheduled {
                duplicate: true, ..
            } => "duplicate",
            Answer::Scheduled { kept: true, .. } => "kept",
            Answer::Scheduled { replaced: true, .. } => "replaced",
            Answer::Scheduled { .. } => "created",
            Answer::Cancelled {
                cancelled: true, ..
            } => "cancelled",
            Answer::Cancelled { inflight: true, .. } => "inflight",
            Answer::Cancelled { .. } => "not_found",
            Answer::Refused { .. } => "refused",
            Answer::Unknown { .. } => "unknown",
        }
    }
}

/// One producer operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Unique over the run; the payload of a schedule is `op-<index>`, so a fire names the
    /// operation whose payload it carries.
    pub index: u64,
    /// The producer (each owns its keys: the operations on one key are sequential).
    pub producer: u32,
    /// The queue.
    pub queue: String,
    /// The task id.
    pub id: String,
    /// What was asked.
    pub kind: OpKind,
    /// The due sent (`due_ms`, harness wall clock); `None` for a cancel.
    pub due_ms: Option<u64>,
    /// The node slot whose API was asked.
    pub slot: usize,
    /// When the request was sent.
    pub invoked: Stamp,
    /// When the answer (or the error) came back.
    pub completed: Stamp,
    /// The answer.
    pub answer: Answer,
}

impl Op {
    /// The payload a schedule carries.
    pub fn payload(index: u64) -> String {
        format!("op-{index}")
    }
}

/// One delivery to the harness's HTTP handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fire {
    /// The queue.
    pub queue: String,
    /// The task id.
    pub id: String,
    /// `due_ms` the node sent.
    pub due_ms: u64,
    /// `fired_ms` the node sent: its cluster clock just before the handler ran.
    pub fired_ms: u64,
    /// The attempt.
    pub attempt: u32,
    /// The generation.
    pub generation: u64,
    /// The node id that fired it.
    pub node: String,
    /// The payload (`op-<index>`).
    pub payload: String,
    /// When the harness received the request.
    pub received: Stamp,
}

impl Fire {
    /// The operation index in the payload, if it has the `op-<index>` form.
    pub fn op_index(&self) -> Option<u64> {
        self.payload.strip_prefix("op-")?.parse().ok()
    }
}

/// What the fault schedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FaultKind {
    /// SIGKILL of a node, then a new node process in its slot.
    Kill,
    /// SIGSTOP of a node, then SIGCONT.
    Stop,
    /// The node's connection to Redis forwards nothing (silence), then heals.
    Blackhole,
    /// The node's connections to Redis are reset, and new ones too, then heal.
    Reset,
    /// Redis is killed (SIGKILL) and started again from its append-only file.
    RedisRestart,
    /// A Sentinel failover (`SENTINEL FAILOVER`): another data node becomes the master.
    Failover,
    /// Redis stands still (`DEBUG POPULATE` of `DELAYQ_SOAK_AOF_KEYS` keys).
    Stall,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Blackhole,
        FaultKind::Reset,
        FaultKind::RedisRestart,
        FaultKind::Failover,
        FaultKind::Stall,
    ];

    /// The kind's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill -9",
            FaultKind::Stop => "SIGSTOP/SIGCONT",
            FaultKind::Blackhole => "proxy blackhole",
            FaultKind::Reset => "proxy reset",
            FaultKind::RedisRestart => "Redis restart (AOF)",
            FaultKind::Failover => "Sentinel failover",
            FaultKind::Stall => "Redis stall (DEBUG POPULATE)",
        }
    }
}

/// One fault, from its start until it healed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// What was done.
    pub kind: FaultKind,
    /// The node id it hit; `None` when it hit every node (Redis itself).
    pub node: Option<String>,
    /// The slot of that node.
    pub slot: Option<usize>,
    /// When it began.
    pub start: Stamp,
    /// When it healed (the node continued, the proxy passes again, the restarted node or
    /// Redis answers).
    pub end: Stamp,
}

/// One node process: a slot's incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLife {
    /// The slot (its proxy and config survive the process).
    pub slot: usize,
    /// The node id it logged.
    pub node: String,
    /// When it was running.
    pub started: Stamp,
}

/// The parameters a run was made with, kept with its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunParams {
    /// Seconds of load and faults.
    pub secs: u64,
    /// Node processes at once.
    pub nodes: usize,
    /// Producer tasks.
    pub producers: usize,
    /// Target operations per second over all producers.
    pub rate: u64,
    /// Sentinel topology with failovers instead of one server with restarts and proxies.
    pub sentinel: bool,
    /// Seed of the producers and the fault schedule.
    pub seed: u64,
    /// The longest the harness's handler holds a fire before answering 200.
    pub hold_max_ms: u64,
    /// The nodes' `engine.lease`.
    pub lease_ms: u64,
    /// The nodes' `node.heartbeat_ttl`.
    pub ttl_ms: u64,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// How it was run.
    pub params: RunParams,
    /// When the load began.
    pub started: Stamp,
    /// When the load and the faults ended.
    pub load_ended: Stamp,
    /// When every queue had settled and the history was closed.
    pub ended: Stamp,
    /// Every operation, in the order they completed.
    pub ops: Vec<Op>,
    /// Every fire, in the order the harness received them.
    pub fires: Vec<Fire>,
    /// Every fault.
    pub faults: Vec<Fault>,
    /// Every node process.
    pub nodes: Vec<NodeLife>,
}

/// The history while the run records it, shared by the recorder, the producers and the fault
/// schedule.
#[derive(Debug, Clone, Default)]
pub struct Recording(Arc<Mutex<Parts>>);

#[derive(Debug, Default)]
struct Parts {
    ops: Vec<Op>,
    fires: Vec<Fire>,
    fired: std::collections::HashSet<(String, String, u64)>,
    faults: Vec<Fault>,
    nodes: Vec<NodeLife>,
}

impl Recording {
    /// Appends an operation.
    pub fn op(&self, op: Op) {
        self.parts().ops.push(op);
    }

    /// Appends a fire.
    pub fn fire(&self, fire: Fire) {
        let mut parts = self.parts();
        parts
            .fired
            .insert((fire.queue.clone(), fire.id.clone(), fire.due_ms));
        parts.fires.push(fire);
    }

    /// Appends a fault.
    pub fn fault(&self, fault: Fault) {
        self.parts().faults.push(fault);
    }

    /// Appends a node process.
    pub fn node(&self, node: NodeLife) {
        self.parts().nodes.push(node);
    }

    /// Whether a fire of `(queue, id)` at `due_ms` has been received.
    pub fn fired(&self, queue: &str, id: &str, due_ms: u64) -> bool {
        self.parts()
            .fired
            .contains(&(queue.to_owned(), id.to_owned(), due_ms))
    }

    /// Fires so far.
    pub fn fire_count(&self) -> usize {
        self.parts().fires.len()
    }

    /// Operations so far.
    pub fn op_count(&self) -> usize {
        self.parts().ops.len()
    }

    /// The latest due any operation sent.
    pub fn latest_due(&self) -> u64 {
        self.parts()
            .ops
            .iter()
            .filter_map(|op| op.due_ms)
            .max()
            .unwrap_or(0)
    }

    /// The history, closed with `params` and the run's times.
    pub fn finish(
        &self,
        params: RunParams,
        started: Stamp,
        load_ended: Stamp,
        ended: Stamp,
    ) -> History {
        let parts = self.parts();
        History {
            params,
            started,
            load_ended,
            ended,
            ops: parts.ops.clone(),
            fires: parts.fires.clone(),
            faults: parts.faults.clone(),
            nodes: parts.nodes.clone(),
        }
    }

    fn parts(&self) -> std::sync::MutexGuard<'_, Parts> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
