//! The producers: async tasks that schedule, replace, cancel and resend through the HTTP API
//! of a random node, and record each operation with its answer.
//!
//! Each producer owns its keys (`p<producer>-<n>`), so the operations on one key are
//! sequential. The rules the checker relies on (see `checker`):
//! - a due is computed on this machine's wall clock (`due_ms` in the request) and never
//!   used twice on one key, except by a resend of the key's last schedule;
//! - after an unknown answer (no answer, a timeout, a 5xx: the request may still take
//!   effect later), the key gets only resends of that due (the producer resends at once, up
//!   to twice, as a producer that timed out would); after an unknown cancel, nothing;
//! - a request that could not connect was not sent: it is recorded as refused (status 0)
//!   and tried again on another node.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::history::{Answer, Clock, Op, OpKind, Recording};

/// The API base URL (`http://127.0.0.1:<port>`) of each slot's node, `None` while the slot
/// has no process.
#[derive(Debug, Clone, Default)]
pub struct Targets(Arc<Mutex<Vec<Option<String>>>>);

impl Targets {
    /// `slots` slots without nodes.
    pub fn new(slots: usize) -> Self {
        Targets(Arc::new(Mutex::new(vec![None; slots])))
    }

    /// Sets slot `slot`'s URL.
    pub fn set(&self, slot: usize, url: Option<String>) {
        self.lock()[slot] = url;
    }

    /// A random slot with a node and its URL, other than `not` when there is a choice.
    fn pick(&self, rng: &mut StdRng, not: Option<usize>) -> Option<(usize, String)> {
        let slots = self.lock();
        let live: Vec<(usize, String)> = slots
            .iter()
            .enumerate()
            .filter_map(|(slot, url)| url.clone().map(|url| (slot, url)))
            .collect();
        let others: Vec<&(usize, String)> =
            live.iter().filter(|(slot, _)| Some(*slot) != not).collect();
        if others.is_empty() {
            return live.first().cloned();
        }
        Some(others[rng.random_range(0..others.len())].clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<String>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How the producers run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Producer tasks.
    pub producers: usize,
    /// Operations per second over all producers.
    pub rate: u64,
    /// The queues the keys are spread over.
    pub queues: Vec<String>,
    /// The seed (each producer adds its number).
    pub seed: u64,
    /// Dues are this far ahead at least, ms.
    pub min_delay_ms: u64,
    /// And at most, ms.
    pub max_delay_ms: u64,
    /// A request not answered within this is unknown.
    pub request_timeout: Duration,
}

/// What a producer knows of one of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Its last operation was a schedule of this due, answered.
    Scheduled(u64),
    /// Its last operation was a cancel, answered.
    Cancelled,
    /// An answer was lost: only resends of this due from now on (none after a cancel).
    Frozen(Option<u64>),
}

#[derive(Debug)]
struct Key {
    queue: String,
    id: String,
    state: State,
    dues: HashSet<u64>,
}

/// Everything a producer shares with the run.
#[derive(Clone)]
pub struct Shared {
    /// The nodes to talk to.
    pub targets: Targets,
    /// Where operations go.
    pub recording: Recording,
    /// The harness clocks.
    pub clock: Clock,
    /// The next operation index.
    pub next_index: Arc<AtomicU64>,
    /// Set when the load must end.
    pub stop: Arc<AtomicBool>,
}

/// Keys a producer keeps operating on; older ones are left as they are.
const ACTIVE_KEYS: usize = 40;

/// Runs producer `number` until `shared.stop` is set.
pub async fn run(number: u32, plan: Plan, shared: Shared) {
    let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_add(u64::from(number) * 7_919));
    let client = reqwest::Client::builder()
        .timeout(plan.request_timeout)
        .connect_timeout(Duration::from_millis(500))
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTP client");
    let period_ms = (1_000 * plan.producers as u64 / plan.rate.max(1)).max(1);
    let mut keys: Vec<Key> = Vec::new();
    let mut created = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let pause = rng.random_range(period_ms / 2..=period_ms * 3 / 2);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let choice: f64 = rng.random();
        let now = shared.clock.now().wall_ms;
        let pick = |rng: &mut StdRng, keys: &[Key], wanted: &dyn Fn(&Key) -> bool| {
            let candidates: Vec<usize> = (0..keys.len()).filter(|&at| wanted(&keys[at])).collect();
            (!candidates.is_empty()).then(|| candidates[rng.random_range(0..candidates.len())])
        };
        let scheduled = |key: &Key| matches!(key.state, State::Scheduled(_));
        let action = if choice < 0.25 || keys.is_empty() {
            None
        } else if choice < 0.50 {
            pick(&mut rng, &keys, &scheduled).map(|at| (at, OpKind::Replace))
        } else if choice < 0.65 {
            pick(&mut rng, &keys, &scheduled).map(|at| (at, OpKind::Cancel))
        } else if choice < 0.85 {
            // Resends: half of them of a due that fired (dedup), half of any.
            let fired = |key: &Key| match key.state {
                State::Scheduled(due) | State::Frozen(Some(due)) => {
                    due < now && shared.recording.fired(&key.queue, &key.id, due)
                }
                _ => false,
            };
            let resendable =
                |key: &Key| matches!(key.state, State::Scheduled(_) | State::Frozen(Some(_)));
            let at = if rng.random_bool(0.5) {
                pick(&mut rng, &keys, &fired)
            } else {
                None
            };
            at.or_else(|| pick(&mut rng, &keys, &resendable))
                .map(|at| (at, OpKind::Resend))
        } else {
            // A new life: a key that fired or was cancelled, scheduled again.
            let done = |key: &Key| match key.state {
                State::Cancelled => true,
                State::Scheduled(due) => {
                    due < now && shared.recording.fired(&key.queue, &key.id, due)
                }
                State::Frozen(_) => false,
            };
            pick(&mut rng, &keys, &done).map(|at| (at, OpKind::Schedule))
        };
        let (at, kind) = match action {
            Some(action) => action,
            None => {
                if keys.len() >= ACTIVE_KEYS {
                    keys.remove(0);
                }
                let queue = plan.queues[created as usize % plan.queues.len()].clone();
                keys.push(Key {
                    queue,
                    id: format!("p{number}-{created}"),
                    state: State::Cancelled,
                    dues: HashSet::new(),
                });
                created += 1;
                (keys.len() - 1, OpKind::Schedule)
            }
        };
        let key = &mut keys[at];
        let due = match kind {
            OpKind::Cancel => None,
            OpKind::Resend => match key.state {
                State::Scheduled(due) | State::Frozen(Some(due)) => Some(due),
                _ => continue,
            },
            OpKind::Schedule | OpKind::Replace => {
                let mut due = now + rng.random_range(plan.min_delay_ms..=plan.max_delay_ms);
                while key.dues.contains(&due) {
                    due += 1;
                }
                Some(due)
            }
        };
        let answer = operate(&client, &shared, &mut rng, number, key, kind, due).await;
        key.state = match (answer.is_definite(), due) {
            (true, Some(due)) => match key.state {
                State::Frozen(_) => State::Frozen(Some(due)),
                _ => State::Scheduled(due),
            },
            (true, None) => State::Cancelled,
            (false, due) => State::Frozen(due),
        };
        if let (State::Frozen(Some(due)), false) = (key.state, answer.is_definite()) {
            // Resend at once, as a producer that timed out would (to another node).
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let resent = operate(
                    &client,
                    &shared,
                    &mut rng,
                    number,
                    key,
                    OpKind::Resend,
                    Some(due),
                )
                .await;
                if resent.is_definite() {
                    break;
                }
            }
        }
    }
}

/// One operation on `key`, tried on up to three nodes while the request cannot connect
/// (each try recorded); returns the last answer.
async fn operate(
    client: &reqwest::Client,
    shared: &Shared,
    rng: &mut StdRng,
    producer: u32,
    key: &mut Key,
    kind: OpKind,
    due: Option<u64>,
) -> Answer {
    let mut last_slot = None;
    let mut answer = Answer::Refused {
        status: 0,
        error: "no node to ask".to_owned(),
    };
    for _ in 0..3 {
        let Some((slot, base)) = shared.targets.pick(rng, last_slot) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        last_slot = Some(slot);
        let index = shared.next_index.fetch_add(1, Ordering::SeqCst);
        let url = format!("{base}/v1/queues/{}/tasks/{}", key.queue, key.id);
        let request = match due {
            Some(due) => client
                .put(&url)
                .json(&json!({"due_ms": due, "payload": Op::payload(index)})),
            None => client.delete(&url),
        };
        let invoked = shared.clock.now();
        answer = answer_of(request.send().await, due.is_some()).await;
        let completed = shared.clock.now();
        if let Some(due) = due {
            key.dues.insert(due);
        }
        shared.recording.op(Op {
            index,
            producer,
            queue: key.queue.clone(),
            id: key.id.clone(),
            kind,
            due_ms: due,
            slot,
            invoked,
            completed,
            answer: answer.clone(),
        });
        if !matches!(answer, Answer::Refused { status: 0, .. }) {
            break;
        }
    }
    answer
}

async fn answer_of(response: Result<reqwest::Response, reqwest::Error>, schedule: bool) -> Answer {
    let response = match response {
        Ok(response) => response,
        Err(error) if error.is_connect() => {
            return Answer::Refused {
                status: 0,
                error: format!("not sent: {error}"),
            }
        }
        Err(error) => {
            return Answer::Unknown {
                error: format!("{error}"),
            }
        }
    };
    let status = response.status().as_u16();
    let body = match response.text().await {
        Ok(body) => body,
        Err(error) => {
            return Answer::Unknown {
                error: format!("status {status}, body lost: {error}"),
            }
        }
    };
    if (400..500).contains(&status) {
        return Answer::Refused {
            status,
            error: body,
        };
    }
    let value: Value = match serde_json::from_str(&body) {
        Ok(value) if status == 200 => value,
        _ => {
            return Answer::Unknown {
                error: format!("status {status}: {body}"),
            }
        }
    };
    let flag = |name: &str| value[name].as_bool();
    if schedule {
        match (
            value["due_ms"].as_u64(),
            flag("replaced"),
            flag("duplicate"),
            flag("kept"),
        ) {
            (Some(due_ms), Some(replaced), Some(duplicate), Some(kept)) => Answer::Scheduled {
                due_ms,
                replaced,
                duplicate,
                kept,
            },
            _ => Answer::Unknown {
                error: format!("unexpected answer: {body}"),
            },
        }
    } else {
        match flag("cancelled") {
            Some(cancelled) => Answer::Cancelled {
                cancelled,
                inflight: value["state"] == "inflight",
            },
            None => Answer::Unknown {
                error: format!("unexpected answer: {body}"),
            },
        }
    }
}
