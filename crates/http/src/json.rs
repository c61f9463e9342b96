//! The JSON objects of the API, shared with the command line's `--json` output, so that
//! `delayq get` and `GET /v1/queues/{queue}/tasks/{id}` print the same thing.

use std::collections::BTreeMap;

use base64::Engine as _;
use delayq_coordinator::QueueFilter;
use delayq_engine::admin::{NodeStatus, PendingTask};
use delayq_engine::recurring::{Cadence, RecurringSchedule, RecurringSet};
use delayq_storage::{Cancel, DeadTask, HeldKey, PartitionStats, TaskInfo};
use serde_json::{json, Map, Value};

/// Puts the payload into `object`: as `"payload"` (a string) when it is UTF-8, else as
/// `"payload_base64"` (standard base64 with padding).
pub fn insert_payload(object: &mut Map<String, Value>, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        Ok(text) => object.insert("payload".to_owned(), Value::from(text)),
        Err(_) => object.insert(
            "payload_base64".to_owned(),
            Value::from(base64::engine::general_purpose::STANDARD.encode(payload)),
        ),
    };
}

/// The most payload bytes a listing (`pending`, `dead`) shows per task; `get` of the task
/// shows the whole payload.
pub const PAYLOAD_PREVIEW_BYTES: usize = 256;

/// Puts a preview of the payload into `object`, as the listings show it: its first
/// [`PAYLOAD_PREVIEW_BYTES`] bytes, as `"payload"` when the whole payload is UTF-8 (cut at a
/// character boundary) or else as `"payload_base64"` (the same key as [`insert_payload`]
/// chooses for the whole payload), with `"payload_bytes"` (the size of the whole payload)
/// and `"payload_truncated"` (whether the preview is shorter than the payload).
pub fn insert_payload_preview(object: &mut Map<String, Value>, payload: &[u8]) {
    let shown = match std::str::from_utf8(payload) {
        Ok(text) => {
            let mut end = text.len().min(PAYLOAD_PREVIEW_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            object.insert("payload".to_owned(), Value::from(&text[..end]));
            end
        }
        Err(_) => {
            let end = payload.len().min(PAYLOAD_PREVIEW_BYTES);
            object.insert(
                "payload_base64".to_owned(),
                Value::from(base64::engine::general_purpose::STANDARD.encode(&payload[..end])),
            );
            end
        }
    };
    object.insert("payload_bytes".to_owned(), Value::from(payload.len()));
    object.insert(
        "payload_truncated".to_owned(),
        Value::from(shown < payload.len()),
    );
}

/// A task as `delayq get` prints it: queue, id, state, due_ms, attempt, generation, payload,
/// last_error, state_since_ms, traceparent (the W3C trace context it was scheduled with, or
/// null).
pub fn task(queue: &str, info: &TaskInfo) -> Value {
    let mut object = Map::new();
    object.insert("queue".to_owned(), Value::from(queue));
    object.insert("id".to_owned(), Value::from(info.id.as_str()));
    object.insert("state".to_owned(), Value::from(info.state.as_str()));
    object.insert("due_ms".to_owned(), Value::from(info.due_ms));
    object.insert("attempt".to_owned(), Value::from(info.attempt));
    object.insert("generation".to_owned(), Value::from(info.generation));
    insert_payload(&mut object, &info.payload);
    object.insert(
        "last_error".to_owned(),
        Value::from(info.last_error.clone()),
    );
    object.insert(
        "state_since_ms".to_owned(),
        Value::from(info.state_since_ms),
    );
    object.insert(
        "traceparent".to_owned(),
        Value::from(info.traceparent.as_ref().map(|trace| trace.as_str())),
    );
    Value::Object(object)
}

/// Per-queue counts as `delayq stats --json` prints them:
/// `{"<queue>":{"pending","due_now","inflight","dead","done","held_back","paused"}}`
/// (`held_back`: due tasks waiting for their flow key, counted in `pending` and `due_now`
/// too; `paused`: the queue is in `paused`).
pub fn stats(stats: &BTreeMap<String, PartitionStats>, paused: &[String]) -> Value {
    let object: Map<String, Value> = stats
        .iter()
        .map(|(queue, counts)| {
            let counts = json!({
                "pending": counts.pending,
                "due_now": counts.due_now,
                "inflight": counts.inflight,
                "dead": counts.dead,
                "done": counts.done,
                "held_back": counts.held_back,
                "paused": paused.contains(queue),
            });
            (queue.clone(), counts)
        })
        .collect();
    Value::Object(object)
}

/// The live nodes as `delayq nodes --json` prints them.
pub fn nodes(nodes: &[NodeStatus]) -> Value {
    Value::Array(nodes.iter().map(node).collect())
}

fn node(status: &NodeStatus) -> Value {
    let node = &status.info;
    let queues = match &node.queues {
        QueueFilter::All => Value::from("*"),
        QueueFilter::Only(queues) => Value::from(queues.clone()),
    };
    json!({
        "id": node.id.as_str(),
        "name": node.name,
        "host": node.host,
        "pid": node.pid,
        "version": node.version,
        "started_ms": node.started_ms,
        "last_heartbeat_ms": node.last_heartbeat_ms,
        "heartbeat_age_ms": status.heartbeat_age_ms,
        "queues": queues,
        "partitions": status.partitions,
        "partitions_by_queue": status.partitions_by_queue,
    })
}

/// The next pending tasks as `delayq pending --json` prints them, payloads cut to a preview
/// ([`insert_payload_preview`]).
pub fn pending(queue: &str, tasks: &[PendingTask]) -> Value {
    Value::Array(
        tasks
            .iter()
            .map(|task| {
                let mut object = Map::new();
                object.insert("queue".to_owned(), Value::from(queue));
                object.insert("id".to_owned(), Value::from(task.id.as_str()));
                object.insert("due_ms".to_owned(), Value::from(task.due_ms));
                object.insert("attempt".to_owned(), Value::from(task.attempt));
                object.insert("generation".to_owned(), Value::from(task.generation));
                insert_payload_preview(&mut object, &task.payload);
                object.insert(
                    "last_error".to_owned(),
                    Value::from(task.last_error.clone()),
                );
                Value::Object(object)
            })
            .collect(),
    )
}

/// Dead letters as `delayq dead --json` prints them, payloads cut to a preview
/// ([`insert_payload_preview`]).
pub fn dead(queue: &str, tasks: &[DeadTask]) -> Value {
    Value::Array(
        tasks
            .iter()
            .map(|task| {
                let mut object = Map::new();
                object.insert("queue".to_owned(), Value::from(queue));
                object.insert("id".to_owned(), Value::from(task.id.as_str()));
                object.insert("due_ms".to_owned(), Value::from(task.due_ms));
                object.insert("attempt".to_owned(), Value::from(task.attempt));
                object.insert("failed_ms".to_owned(), Value::from(task.failed_ms));
                object.insert(
                    "last_error".to_owned(),
                    Value::from(task.last_error.clone()),
                );
                insert_payload_preview(&mut object, &task.payload);
                Value::Object(object)
            })
            .collect(),
    )
}

/// The flow keys holding tasks back as `delayq keys --json` prints them: one object per key,
/// `{"queue","key","running","waiting","oldest_due_ms","longest_wait_ms"}`, the most waiting
/// first; `longest_wait_ms` is how long the earliest-due waiting task has waited at `now_ms`
/// (the cluster clock), 0 when it is not due yet.
pub fn held_keys(queue: &str, keys: &[HeldKey], now_ms: u64) -> Value {
    Value::Array(
        keys.iter()
            .map(|key| {
                json!({
                    "queue": queue,
                    "key": key.key,
                    "running": key.running,
                    "waiting": key.waiting,
                    "oldest_due_ms": key.oldest_due_ms,
                    "longest_wait_ms": now_ms.saturating_sub(key.oldest_due_ms),
                })
            })
            .collect(),
    )
}

/// The answer of a cancel: `{"cancelled":true|false}`, plus `"state":"inflight"` when the
/// task's handler was running (it cannot be un-run; no retry follows it).
pub fn cancelled(outcome: Cancel) -> Value {
    match outcome.state() {
        Some(state) => json!({ "cancelled": outcome.cancelled(), "state": state }),
        None => json!({ "cancelled": outcome.cancelled() }),
    }
}

/// The answer of a retry of dead letters: `{"retried":N}`.
pub fn retried(count: u64) -> Value {
    json!({ "retried": count })
}

/// The answer of a purge of dead letters: `{"purged":N}`.
pub fn purged(count: u64) -> Value {
    json!({ "purged": count })
}

/// The answer of a queue deletion: `{"queue","deleted":true,"tasks":N}`, `tasks` being the
/// pending, in-flight and dead tasks it removed.
pub fn queue_deleted(queue: &str, tasks: u64) -> Value {
    json!({ "queue": queue, "deleted": true, "tasks": tasks })
}

/// The answer to a recurring upsert: `{"name","queue","next_ms","result"}`.
pub fn recurring_set(set: &RecurringSet) -> Value {
    json!({
        "name": set.name,
        "queue": set.queue,
        "next_ms": set.next_ms,
        "result": set.result.as_str(),
    })
}

/// A recurring schedule as `delayq recurring get` prints it: its spec (`queue`, `cron` and
/// `tz` or `every`, `payload`, `misfire`, `misfire_grace`, `max_catchup`, `overlap`,
/// `start_at_ms`, `end_at_ms`), `paused`, `next_ms`, `last_tick_ms`, `last_fired_ms` and the
/// counts `fired`, `skipped`, `missed`.
pub fn recurring(schedule: &RecurringSchedule) -> Value {
    let spec = &schedule.spec;
    let mut object = Map::new();
    object.insert("name".to_owned(), Value::from(schedule.name.as_str()));
    object.insert("queue".to_owned(), Value::from(spec.queue.as_str()));
    match &spec.cadence {
        Cadence::Cron { expr, tz } => {
            object.insert("cron".to_owned(), Value::from(expr.as_str()));
            object.insert("tz".to_owned(), Value::from(tz.as_str()));
        }
        Cadence::Every { every_ms } => {
            let every = humantime::format_duration(std::time::Duration::from_millis(*every_ms));
            object.insert("every".to_owned(), Value::from(every.to_string()));
            object.insert("every_ms".to_owned(), Value::from(*every_ms));
        }
    }
    object.insert("payload".to_owned(), Value::from(spec.payload.clone()));
    object.insert("misfire".to_owned(), Value::from(spec.misfire.as_str()));
    let grace = humantime::format_duration(std::time::Duration::from_millis(spec.misfire_grace_ms));
    object.insert("misfire_grace".to_owned(), Value::from(grace.to_string()));
    object.insert("max_catchup".to_owned(), Value::from(spec.max_catchup));
    object.insert("overlap".to_owned(), Value::from(spec.overlap.as_str()));
    object.insert("start_at_ms".to_owned(), Value::from(spec.start_at_ms));
    object.insert("end_at_ms".to_owned(), Value::from(spec.end_at_ms));
    object.insert("paused".to_owned(), Value::from(schedule.paused));
    object.insert("next_ms".to_owned(), Value::from(schedule.next_ms));
    object.insert(
        "last_tick_ms".to_owned(),
        Value::from(schedule.last_tick_ms),
    );
    object.insert(
        "last_fired_ms".to_owned(),
        Value::from(schedule.last_fired_ms),
    );
    object.insert("fired".to_owned(), Value::from(schedule.fired));
    object.insert("skipped".to_owned(), Value::from(schedule.skipped));
    object.insert("missed".to_owned(), Value::from(schedule.missed));
    object.insert("created_ms".to_owned(), Value::from(schedule.created_ms));
    object.insert("updated_ms".to_owned(), Value::from(schedule.updated_ms));
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_utf8_payload_goes_to_payload_base64() {
        let mut object = Map::new();
        insert_payload(&mut object, &[0xff, 0x00]);
        assert_eq!(object.get("payload_base64"), Some(&Value::from("/wA=")));
        let mut object = Map::new();
        insert_payload(&mut object, b"{\"a\":1}");
        assert_eq!(object.get("payload"), Some(&Value::from("{\"a\":1}")));
    }

    #[test]
    fn a_preview_keeps_a_short_payload_whole() {
        let mut object = Map::new();
        insert_payload_preview(&mut object, b"{\"a\":1}");
        assert_eq!(
            Value::Object(object),
            json!({"payload": "{\"a\":1}", "payload_bytes": 7, "payload_truncated": false})
        );
        let mut object = Map::new();
        insert_payload_preview(&mut object, b"");
        assert_eq!(
            Value::Object(object),
            json!({"payload": "", "payload_bytes": 0, "payload_truncated": false})
        );
    }

    #[test]
    fn a_preview_cuts_a_long_payload_at_a_character_boundary() {
        // 255 ASCII bytes then a 2-byte character across the 256th byte.
        let text = format!(
            "{}é{}",
            "a".repeat(PAYLOAD_PREVIEW_BYTES - 1),
            "b".repeat(50_000)
        );
        let mut object = Map::new();
        insert_payload_preview(&mut object, text.as_bytes());
        assert_eq!(
            object.get("payload"),
            Some(&Value::from("a".repeat(PAYLOAD_PREVIEW_BYTES - 1)))
        );
        assert_eq!(object.get("payload_bytes"), Some(&Value::from(text.len())));
        assert_eq!(object.get("payload_truncated"), Some(&Value::from(true)));
        let exact = "c".repeat(PAYLOAD_PREVIEW_BYTES);
        let mut object = Map::new();
        insert_payload_preview(&mut object, exact.as_bytes());
        assert_eq!(object.get("payload"), Some(&Value::from(exact.as_str())));
        assert_eq!(object.get("payload_truncated"), Some(&Value::from(false)));
    }

    #[test]
    fn a_preview_of_a_binary_payload_is_base64_of_its_first_bytes() {
        // Its first 256 bytes are ASCII; the payload as a whole is not UTF-8.
        let mut payload = vec![b'x'; 1_000];
        payload.push(0xff);
        let mut object = Map::new();
        insert_payload_preview(&mut object, &payload);
        assert!(object.get("payload").is_none(), "{object:?}");
        let shown = base64::engine::general_purpose::STANDARD
            .decode(object["payload_base64"].as_str().expect("a string"))
            .expect("base64");
        assert_eq!(shown, payload[..PAYLOAD_PREVIEW_BYTES]);
        assert_eq!(object.get("payload_bytes"), Some(&Value::from(1_001)));
        assert_eq!(object.get("payload_truncated"), Some(&Value::from(true)));
    }

    #[test]
    fn listings_show_previews() {
        let long = "z".repeat(10_000);
        let tasks = [PendingTask {
            id: "a".to_owned(),
            due_ms: 5,
            attempt: 1,
            generation: 1,
            payload: long.clone().into(),
            last_error: None,
        }];
        let listed = pending("orders", &tasks);
        assert_eq!(listed[0]["payload"].as_str().map(str::len), Some(256));
        assert_eq!(listed[0]["payload_bytes"], 10_000);
        assert_eq!(listed[0]["payload_truncated"], true);
        let dead_letters = [DeadTask {
            id: delayq_storage::TaskId::new("b").expect("id"),
            due_ms: 5,
            attempt: 3,
            failed_ms: 9,
            last_error: Some("boom".to_owned()),
            payload: long.into(),
        }];
        let listed = dead("orders", &dead_letters);
        assert_eq!(listed[0]["payload"].as_str().map(str::len), Some(256));
        assert_eq!(listed[0]["payload_bytes"], 10_000);
        assert_eq!(listed[0]["payload_truncated"], true);
    }

    #[test]
    fn stats_are_keyed_by_queue() {
        let mut counts = BTreeMap::new();
        counts.insert(
            "orders".to_owned(),
            PartitionStats {
                pending: 3,
                due_now: 1,
                inflight: 2,
                dead: 0,
                done: 9,
                held_back: 0,
            },
        );
        assert_eq!(
            stats(&counts, &["orders".to_owned()]),
            json!({"orders": {"pending": 3, "due_now": 1, "inflight": 2, "dead": 0, "done": 9, "held_back": 0, "paused": true}})
        );
    }

    #[test]
    fn held_keys_list_their_counts_and_the_longest_wait() {
        let keys = [
            HeldKey {
                key: "customer-7".to_owned(),
                running: 1,
                waiting: 4,
                oldest_due_ms: 1_000,
            },
            HeldKey {
                key: "later".to_owned(),
                running: 0,
                waiting: 1,
                oldest_due_ms: 9_000,
            },
        ];
        assert_eq!(
            held_keys("hooks", &keys, 5_000),
            json!([
                {"queue": "hooks", "key": "customer-7", "running": 1, "waiting": 4, "oldest_due_ms": 1_000, "longest_wait_ms": 4_000},
                {"queue": "hooks", "key": "later", "running": 0, "waiting": 1, "oldest_due_ms": 9_000, "longest_wait_ms": 0},
            ])
        );
        assert_eq!(held_keys("hooks", &[], 5_000), json!([]));
    }
}
