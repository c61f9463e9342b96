//! The exact schemas of the document: path parameters, request bodies and the values inside
//! them, built from the validators' own bounds so the document says what the server enforces.
//!
//! A value the schema allows is accepted by the server, and a value it forbids is refused with
//! 400; the unit tests below check each pattern against the validator it describes
//! ([`QueueName::new`], [`TaskId::new`], [`ScheduleName::new`], the duration and time parsers).
//! Where the server's parser accepts more than a pattern can say plainly (every humantime
//! unit, cron's lists and ranges, RFC 3339 without an offset), the pattern names the common
//! forms and the description says what else is taken: a generated client never sends a value
//! that is refused.
//!
//! [`QueueName::new`]: delayq_storage::QueueName::new
//! [`TaskId::new`]: delayq_storage::TaskId::new
//! [`ScheduleName::new`]: delayq_engine::recurring::ScheduleName::new

use delayq_engine::recurring::spec::{MAX_MAX_CATCHUP, MAX_SCHEDULE_NAME_CHARS};
use delayq_storage::{MAX_DUE_MS, MAX_ID_BYTES, MAX_QUEUE_NAME_CHARS};
use serde_json::{json, Value};

/// Epoch milliseconds below this (10^11, 1973-03-03) are refused: they look like seconds.
pub const MIN_EPOCH_MS: u64 = delayq_engine::recurring::spec::MIN_PLAUSIBLE_EPOCH_MS;

/// The longest `delay_ms` accepted: 10^14 ms, about 3,170 years (a due must stay before the
/// year 10000 whenever it is sent).
pub const MAX_DELAY_MS: u64 = 100_000_000_000_000;

/// The schedule modes, as a body names them.
pub const MODES: [&str; 4] = ["replace", "if_absent", "earlier", "later"];

/// A queue name: `[A-Za-z0-9_.-]`, 1..=64 characters.
pub const QUEUE_NAME_PATTERN: &str = "^[A-Za-z0-9_.-]{1,64}$";

/// A task id: 1..=512 bytes of UTF-8 without NUL (the length is in bytes: a schema's
/// `maxLength` counts characters, so the description says it).
pub const TASK_ID_PATTERN: &str = "^[^\\x00]+$";

/// A stored W3C `traceparent`: version `00`, lowercase hex (the all-zero ids and version
/// `ff` are never stored either: [`TraceParent::parse`] refuses them).
///
/// [`TraceParent::parse`]: delayq_storage::TraceParent::parse
pub const TRACEPARENT_PATTERN: &str = "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$";

/// A recurring schedule's name: `[A-Za-z0-9_.:-]`, 1..=128 characters.
pub const SCHEDULE_NAME_PATTERN: &str = "^[A-Za-z0-9_.:-]{1,128}$";

/// One to four `<number><unit>` parts (units ms, s, m, h, d; up to five digits each) separated
/// by a space: `500ms`, `30s`, `1h 30m`. Never longer than about 1,100 years.
pub const DURATION_PATTERN: &str = "^[0-9]{1,5}(?:ms|s|m|h|d)(?: [0-9]{1,5}(?:ms|s|m|h|d)){0,3}$";

/// A duration of at least one second: as [`DURATION_PATTERN`], its first part a positive
/// number of seconds or a larger unit.
pub const EVERY_PATTERN: &str = "^[1-9][0-9]{0,4}(?:s|m|h|d)(?: [0-9]{1,5}(?:ms|s|m|h|d)){0,3}$";

/// Five cron fields, each `*`, a number in its range, or (minutes, hours) `*/N`; days of the
/// month 1..=28 so that every expression of the pattern fires every year.
pub const CRON_PATTERN: &str = "^(?:\\*|\\*/[1-9]|[1-5]?[0-9]) (?:\\*|\\*/[1-9]|1?[0-9]|2[0-3]) (?:\\*|[1-9]|1[0-9]|2[0-8]) (?:\\*|[1-9]|1[0-2]) (?:\\*|[0-6])$";

/// Epoch milliseconds as text: 10^11 up to 2.5 × 10^14 (the year 9892).
const EPOCH_MS_TEXT: &str = "[1-9][0-9]{11,13}|1[0-9]{14}|2[0-4][0-9]{13}";

/// RFC 3339 with `Z` or an offset, a real calendar date from 1971 to 9989 (29 February left
/// out), optional fractions of a second.
const RFC3339_TEXT: &str = concat!(
    "(?:197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9])-",
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))",
    "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?",
    "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
);

/// An absolute time as text: RFC 3339 or epoch milliseconds.
pub fn time_pattern() -> String {
    format!("^(?:{RFC3339_TEXT}|{EPOCH_MS_TEXT})$")
}

/// The schema of a queue name.
pub fn queue_name() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_QUEUE_NAME_CHARS,
        "pattern": QUEUE_NAME_PATTERN,
        "description": "1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-'",
        "example": "orders",
    })
}

/// The schema of a task id.
pub fn task_id() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_ID_BYTES,
        "pattern": TASK_ID_PATTERN,
        "description": "1 to 512 bytes of UTF-8 (512 ASCII characters, fewer when they take more bytes), no NUL",
        "example": "order-42",
    })
}

/// The schema of a recurring schedule's name.
pub fn schedule_name() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_SCHEDULE_NAME_CHARS,
        "pattern": SCHEDULE_NAME_PATTERN,
        "description": "1 to 128 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-'",
        "example": "nightly-report",
    })
}

/// The properties of a task as a body gives it (without its id).
fn task_properties() -> serde_json::Map<String, Value> {
    let properties = json!({
        "delay_ms": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_DELAY_MS,
            "description": "Fire this many milliseconds from now (at most 10^14)",
        },
        "due_ms": {
            "type": "integer",
            "minimum": MIN_EPOCH_MS,
            "maximum": MAX_DUE_MS,
            "description": "Fire at this time, in milliseconds since the Unix epoch on the cluster clock; a number below 10^11 looks like seconds and is refused",
        },
        "in": {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": "Fire after this duration: one to four parts of a number and a unit (ms, s, m, h, d) separated by spaces, like \"30s\" or \"1h 30m\" (the server also takes the other humantime units)",
            "example": "30s",
        },
        "at": {
            "type": "string",
            "pattern": time_pattern(),
            "description": "Fire at this time: RFC 3339 with Z or an offset, or epoch milliseconds as text (at least 10^11)",
            "example": "2030-01-01T09:00:00+02:00",
        },
        "payload": {
            "type": "string",
            "description": "Handed to the handler; at most engine.max_payload bytes (else 413)",
        },
        "mode": {
            "type": "string",
            "enum": MODES,
            "description": "For an id with a live task: replace (the default: the new due wins), if_absent (the live task stays), earlier or later (the earlier or later due wins, with its payload)",
        },
    });
    match properties {
        Value::Object(properties) => properties,
        _ => serde_json::Map::new(),
    }
}

/// Exactly one of the four forms of a due time, said as one `not`: not (none of them, or
/// any two). A `oneOf` of `required` lists says the same, but client generators read a
/// top-level `oneOf` as a union of types and lose the object's properties; they leave `not`
/// to validators.
fn one_due_form() -> Value {
    let forms = ["delay_ms", "due_ms", "in", "at"];
    let mut refused =
        vec![json!({"not": {"anyOf": forms.map(|form| json!({"required": [form]}))}})];
    for (i, first) in forms.iter().enumerate() {
        for second in &forms[i + 1..] {
            refused.push(json!({"required": [first, second]}));
        }
    }
    json!({"anyOf": refused})
}

/// The body of `PUT /v1/queues/{queue}/tasks/{id}`.
pub fn task_body() -> Value {
    json!({
        "type": "object",
        "description": "Exactly one of delay_ms, due_ms, in and at; an optional payload and mode. A field is given with its value or left out (null is refused). An \"id\" equal to the path's is tolerated.",
        "properties": task_properties(),
        "additionalProperties": false,
        "not": one_due_form(),
        "example": {"in": "30s", "payload": "{\"order\":42}"},
    })
}

/// One item of `POST /v1/queues/{queue}/tasks`.
pub fn bulk_task() -> Value {
    let mut properties = task_properties();
    properties.insert("id".to_owned(), task_id());
    json!({
        "type": "object",
        "description": "A task with its id, exactly one of delay_ms, due_ms, in and at, an optional payload and mode",
        "properties": properties,
        "required": ["id"],
        "additionalProperties": false,
        "not": one_due_form(),
        "example": {"id": "order-42", "delay_ms": 30000},
    })
}

/// The body of `POST /v1/queues/{queue}/tasks`.
pub fn bulk_body() -> Value {
    json!({
        "type": "array",
        "items": {"$ref": "#/components/schemas/BulkTask"},
        "maxItems": crate::routes::tasks::MAX_BULK_ITEMS,
    })
}

/// A time as a recurring spec takes it: epoch milliseconds (a number or text) or RFC 3339.
fn spec_time(description: &str, example: &str) -> Value {
    json!({
        "description": description,
        "example": example,
        "oneOf": [
            {"type": "integer", "minimum": MIN_EPOCH_MS, "maximum": MAX_DUE_MS},
            {"type": "string", "pattern": time_pattern()},
        ],
    })
}

/// The body of `PUT /v1/recurring/{name}`.
pub fn recurring_body() -> Value {
    json!({
        "type": "object",
        "description": "The spec, as the flags of `delayq recurring set`: a queue and exactly one of cron (with an optional tz) and every. A field is given with its value or left out (null is refused). end_at, when given with start_at, must be after it.",
        "properties": {
            "queue": queue_name(),
            "cron": {
                "type": "string",
                "pattern": CRON_PATTERN,
                "description": "Five fields: minute hour day-of-month month day-of-week, each *, a number or (minute, hour) */N; the server also takes lists, ranges and names",
                "example": "0 9 * * 1",
            },
            "tz": {"$ref": "#/components/schemas/TimeZone"},
            "every": {
                "type": "string",
                "pattern": EVERY_PATTERN,
                "description": "A duration of at least 1 s, like \"5m\" or \"1h 30m\"",
                "example": "5m",
            },
            "payload": {"type": "string", "description": "The payload of every tick"},
            "misfire": {
                "type": "string",
                "enum": ["skip", "once", "all"],
                "description": "Ticks missed beyond misfire_grace: skip them, fire the latest once (the default), or all (at most max_catchup)",
            },
            "misfire_grace": {
                "type": "string",
                "pattern": DURATION_PATTERN,
                "description": "How late a tick may still fire (default 1m)",
            },
            "max_catchup": {
                "description": "1..=10000 (default 100), a number or text",
                "oneOf": [
                    {"type": "integer", "minimum": 1, "maximum": MAX_MAX_CATCHUP},
                    {"type": "string", "pattern": "^(?:[1-9][0-9]{0,3}|10000)$"},
                ],
            },
            "overlap": {
                "type": "string",
                "enum": ["allow", "skip"],
                "description": "allow (default), or skip a tick while the previous one is pending or in flight",
            },
            "start_at": spec_time("No tick before this time", "2030-01-01T00:00:00Z"),
            "end_at": spec_time("No tick after this time; after start_at", "2031-01-01T00:00:00Z"),
        },
        "required": ["queue"],
        "additionalProperties": false,
        // Exactly one of cron and every, and no tz with every (as one `not`: see
        // one_due_form).
        "not": {"anyOf": [
            {"not": {"anyOf": [{"required": ["cron"]}, {"required": ["every"]}]}},
            {"required": ["cron", "every"]},
            {"required": ["every", "tz"]},
        ]},
        "example": {"queue": "reports", "cron": "0 9 * * 1", "tz": "Europe/Berlin"},
    })
}

/// The IANA zones a cron schedule may name (chrono-tz's list, which the server parses).
pub fn time_zone() -> Value {
    let names: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    json!({
        "type": "string",
        "enum": names,
        "description": "An IANA time zone of cron (default UTC)",
        "example": "Europe/Berlin",
    })
}

/// An object of the answers: `properties`, all of them required (an answer may carry more
/// fields in a later release, so extra ones are allowed).
fn answer(description: &str, properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default();
    json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": required,
    })
}

/// The answers' schemas: the objects the CLI's `--json` prints, by name.
fn answers() -> Vec<(&'static str, Value)> {
    let count = json!({"type": "integer", "minimum": 0});
    let ms = json!({"type": "integer", "minimum": 0});
    let ms_or_null = json!({"type": ["integer", "null"], "minimum": 0});
    let text = json!({"type": "string"});
    let flag = json!({"type": "boolean"});
    vec![
        ("Scheduled", answer(
            "What a schedule did, as `delayq schedule --json` prints it",
            json!({
                "queue": text, "id": text, "due_ms": ms,
                "replaced": {"type": "boolean", "description": "A live task with this id was replaced"},
                "duplicate": {"type": "boolean", "description": "The same id and due already fired within executed_retention: nothing was scheduled"},
                "kept": {"type": "boolean", "description": "The mode kept the live task that was there; due_ms is its due"},
            }),
        )),
        ("Task", {
            let mut task = answer(
                "A task as `delayq get --json` prints it: payload when it is UTF-8, else payload_base64",
                json!({
                    "queue": text, "id": text,
                    "state": {"type": "string", "enum": ["pending", "inflight", "dead", "done"]},
                    "due_ms": ms, "attempt": count, "generation": count,
                    "last_error": {"type": ["string", "null"]},
                    "state_since_ms": ms_or_null,
                    "traceparent": {
                        "type": ["string", "null"],
                        "pattern": TRACEPARENT_PATTERN,
                        "description": "The W3C trace context the task was scheduled with (its fire's span links to it); null when it was scheduled without one, once it completed, or when it was cancelled while running",
                        "example": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                    },
                }),
            );
            task["properties"]["payload"] = json!({"type": "string", "description": "The payload, when it is UTF-8"});
            task["properties"]["payload_base64"] = json!({"type": "string", "description": "The payload in standard base64, when it is not UTF-8"});
            task
        }),
        ("Cancelled", {
            let mut cancelled = answer(
                "What a cancel did: cancelled, plus state \"inflight\" when the handler was running (it cannot be un-run; no retry follows)",
                json!({"cancelled": flag}),
            );
            cancelled["properties"]["state"] = json!({"type": "string", "enum": ["inflight"]});
            cancelled
        }),
        ("BulkScheduled", answer(
            "What a bulk schedule did, as `delayq schedule --from` prints it, plus the items the store refused",
            json!({
                "scheduled": count, "replaced": count, "duplicates": count, "kept": count,
                "failed": count,
                "errors": {
                    "type": "array",
                    "description": "The first 100 failed items",
                    "items": answer("A failed item", json!({"index": count, "error": text})),
                },
                "errors_truncated": flag,
            }),
        )),
        ("QueuePaused", answer("The queue and whether it is paused now", json!({"queue": text, "paused": flag}))),
        ("QueueDeleted", answer(
            "A deleted queue and how many pending, in-flight and dead tasks went with it",
            json!({"queue": text, "deleted": {"type": "boolean", "const": true}, "tasks": count}),
        )),
        ("Retried", answer("How many dead letters are due again", json!({"retried": count}))),
        ("Purged", answer("How many dead letters were deleted", json!({"purged": count}))),
        ("HeldKey", answer(
            "A flow key holding tasks back, as `delayq keys --json` lists it",
            json!({
                "queue": text,
                "key": {"type": "string", "minLength": 1, "description": "The flow key: the part of the ids between the first { and the next }"},
                "running": {"type": "integer", "minimum": 0, "description": "Tasks of the key holding a slot (running, or with FIFO order waiting for a retry)"},
                "waiting": {"type": "integer", "minimum": 0, "description": "Tasks of the key held back: due, waiting for a slot or for the key's rate"},
                "oldest_due_ms": {"type": "integer", "minimum": 0, "description": "The earliest due among the waiting tasks"},
                "longest_wait_ms": {"type": "integer", "minimum": 0, "description": "How long that task has waited, on the cluster clock"},
            }),
        )),
        ("HeldKeys", json!({
            "type": "array",
            "description": "The flow keys holding tasks back, the most waiting first (ties by key)",
            "items": {"$ref": "#/components/schemas/HeldKey"},
            "maxItems": delayq_engine::admin::MAX_LIST_LIMIT,
        })),
        ("RecurringSet", answer(
            "What a recurring upsert did",
            json!({
                "name": text, "queue": text, "next_ms": ms_or_null,
                "result": {"type": "string", "enum": ["created", "updated", "unchanged"]},
            }),
        )),
        ("RecurringDeleted", answer(
            "A deleted recurring schedule",
            json!({"name": text, "deleted": {"type": "boolean", "const": true}}),
        )),
    ]
}

/// The schema of each operation's 200 answer that has one of [`answers`], by operation id.
pub fn answer_of(operation_id: &str) -> Option<Value> {
    let name = match operation_id {
        "schedule_task" => "Scheduled",
        "get_task" => "Task",
        "cancel_task" => "Cancelled",
        "schedule_tasks" => "BulkScheduled",
        "pause_queue" | "resume_queue" => "QueuePaused",
        "delete_queue" => "QueueDeleted",
        "retry_dead_letter" | "retry_all_dead_letters" => "Retried",
        "purge_dead_letter" | "purge_all_dead_letters" => "Purged",
        "list_held_keys" => "HeldKeys",
        "set_recurring" => "RecurringSet",
        "delete_recurring" => "RecurringDeleted",
        _ => return None,
    };
    Some(json!({"$ref": format!("#/components/schemas/{name}")}))
}

/// The schema of the path parameter called `name` in a route of `path`, if it is one of ours.
pub fn path_parameter(path: &str, name: &str) -> Option<Value> {
    match name {
        "queue" => Some(queue_name()),
        "id" => Some(task_id()),
        "name" if path.starts_with("/v1/recurring/") => Some(schedule_name()),
        _ => None,
    }
}

/// The component schemas the document carries, by name.
pub fn components() -> Vec<(&'static str, Value)> {
    vec![
        ("TaskBody", task_body()),
        ("BulkTask", bulk_task()),
        ("RecurringBody", recurring_body()),
        ("TimeZone", time_zone()),
    ]
    .into_iter()
    .chain(answers())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayq_engine::recurring::{RawSpec, ScheduleName};
    use delayq_storage::{QueueName, TaskId};
    use regex::Regex;

    fn regex(pattern: &str) -> Regex {
        Regex::new(pattern).expect("a valid pattern")
    }

    /// Every ASCII character alone, names at and over the length bound, and a few others.
    fn candidates(bound: usize) -> Vec<String> {
        let mut candidates: Vec<String> = (0u8..128)
            .map(|byte| char::from(byte).to_string())
            .collect();
        candidates.extend([
            String::new(),
            "a".repeat(bound),
            "a".repeat(bound + 1),
            "é".to_owned(),
            "a b".to_owned(),
            "order-42.x_y".to_owned(),
            "a:b".to_owned(),
            "{a}".to_owned(),
        ]);
        candidates
    }

    #[test]
    fn a_stored_traceparent_matches_its_pattern() {
        let pattern = regex(TRACEPARENT_PATTERN);
        for value in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            // A later version is stored as its first 55 characters.
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        ] {
            let stored = delayq_storage::TraceParent::parse(value).expect("valid");
            assert!(pattern.is_match(stored.as_str()), "{stored}");
        }
        assert!(!pattern.is_match("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
    }

    #[test]
    fn the_name_patterns_are_the_validators() {
        let queue = regex(QUEUE_NAME_PATTERN);
        for name in candidates(MAX_QUEUE_NAME_CHARS) {
            assert_eq!(
                queue.is_match(&name),
                QueueName::new(&name).is_ok(),
                "queue {name:?}"
            );
        }
        let schedule = regex(SCHEDULE_NAME_PATTERN);
        for name in candidates(MAX_SCHEDULE_NAME_CHARS) {
            assert_eq!(
                schedule.is_match(&name),
                ScheduleName::new(&name).is_ok(),
                "schedule {name:?}"
            );
        }
        let id = regex(TASK_ID_PATTERN);
        for text in candidates(MAX_ID_BYTES) {
            let fits = id.is_match(&text) && text.chars().count() <= MAX_ID_BYTES;
            assert_eq!(fits, TaskId::new(&text).is_ok(), "id {text:?}");
        }
    }

    #[test]
    fn every_duration_of_the_pattern_parses() {
        let duration = regex(DURATION_PATTERN);
        let every = regex(EVERY_PATTERN);
        for text in [
            "0ms",
            "500ms",
            "30s",
            "5m",
            "1h 30m",
            "99999d 99999d 99999d 99999h",
            "00000s",
        ] {
            assert!(duration.is_match(text), "{text}");
            let parsed = crate::time::parse_delay(text).expect("a duration");
            assert!(parsed.as_millis() < u128::from(MAX_DELAY_MS), "{text}");
        }
        for text in [
            "",
            "5",
            "5 s",
            "1h  30m",
            "5y",
            "123456s",
            "1h 2m 3s 4ms 5ms",
            "-5s",
        ] {
            assert!(!duration.is_match(text), "{text}");
        }
        for text in ["1s", "5m", "99999d 99999d 99999d 99999d", "1s 0ms"] {
            assert!(every.is_match(text), "{text}");
            assert!(
                crate::time::parse_delay(text)
                    .expect("a duration")
                    .as_millis()
                    >= 1000
            );
        }
        for text in ["0s", "500ms", "09s"] {
            assert!(!every.is_match(text), "{text}");
        }
    }

    #[test]
    fn every_time_of_the_pattern_parses() {
        let time = regex(&time_pattern());
        for text in [
            "1971-01-01T00:00:00+23:59",
            "2030-01-01T09:00:00+02:00",
            "2024-02-28T23:59:59.123456789Z",
            "9989-12-31T23:59:59-23:59",
            "2023-04-30T00:00:00Z",
            "100000000000",
            "99999999999999",
            "249999999999999",
        ] {
            assert!(time.is_match(text), "{text}");
            let ms = crate::time::parse_at(text).unwrap_or_else(|error| panic!("{text}: {error}"));
            assert!(ms <= MAX_DUE_MS, "{text}");
        }
        for text in [
            "99999999999",
            "2023-02-29T00:00:00Z",
            "2023-04-31T00:00:00Z",
            "1970-01-01T00:00:00Z",
            "2023-11-14T22:13:20",
            "2023-11-14T24:00:00Z",
            "253402300799999",
        ] {
            assert!(!time.is_match(text), "{text}");
        }
    }

    #[test]
    fn every_cron_of_the_pattern_is_a_valid_spec() {
        let cron = regex(CRON_PATTERN);
        for expr in [
            "* * * * *",
            "0 9 * * 1",
            "*/5 */2 28 2 0",
            "59 23 1 12 6",
            "0 0 * 1 *",
        ] {
            assert!(cron.is_match(expr), "{expr}");
            let spec = RawSpec {
                queue: Some("q".into()),
                cron: Some(expr.into()),
                ..RawSpec::default()
            };
            spec.validate()
                .unwrap_or_else(|error| panic!("{expr}: {error}"));
        }
        for expr in [
            "",
            "* * * *",
            "60 * * * *",
            "0 24 * * *",
            "0 0 29 2 *",
            "0 0 * 13 *",
            "0 0 * * 7",
            "05 * * * *",
        ] {
            assert!(!cron.is_match(expr), "{expr}");
        }
    }

    #[test]
    fn every_zone_of_the_enum_is_taken() {
        let zones = time_zone();
        let names = zones["enum"].as_array().expect("an enum");
        assert!(names.len() > 300, "{}", names.len());
        for name in names {
            let spec = RawSpec {
                queue: Some("q".into()),
                cron: Some("0 9 * * *".into()),
                tz: name.as_str().map(str::to_owned),
                ..RawSpec::default()
            };
            spec.validate()
                .unwrap_or_else(|error| panic!("{name}: {error}"));
        }
    }
}
