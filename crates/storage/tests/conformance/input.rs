//! Bad input: each is a typed error that names the value, and nothing is stored.
//!
//! Queue names and ids are validated when they are built, before any backend sees them;
//! the cases still run per backend so that every backend's suite lists the whole contract.

use bytes::Bytes;
use delayq_storage::{
    NewTask, QueueName, ScheduleMode, StorageError, StoreOptions, TaskId, MAX_DUE_MS,
};

use super::*;

fn assert_bad_queue_name(name: &str) {
    match QueueName::new(name) {
        Err(StorageError::InvalidQueueName {
            name: given,
            reason,
        }) => {
            assert_eq!(given, name);
            assert!(!reason.is_empty());
            let message = StorageError::InvalidQueueName {
                name: given,
                reason,
            }
            .to_string();
            assert!(message.contains(&format!("{name:?}")), "{message}");
        }
        other => panic!("expected InvalidQueueName for {name:?}, got {other:?}"),
    }
}

pub async fn queue_name_empty_is_rejected(_make: Make) {
    assert_bad_queue_name("");
}

pub async fn queue_name_of_65_chars_is_rejected(_make: Make) {
    assert_bad_queue_name(&"q".repeat(65));
    assert!(
        QueueName::new("q".repeat(64)).is_ok(),
        "64 characters are allowed"
    );
}

pub async fn queue_name_with_a_brace_is_rejected(_make: Make) {
    assert_bad_queue_name("orders{1}");
    assert_bad_queue_name("orders}");
}

pub async fn queue_name_with_a_colon_is_rejected(_make: Make) {
    assert_bad_queue_name("orders:eu");
}

pub async fn queue_name_with_a_space_is_rejected(_make: Make) {
    assert_bad_queue_name("order timeout");
}

pub async fn queue_name_not_ascii_is_rejected(_make: Make) {
    assert_bad_queue_name("bestellungen-größe");
}

pub async fn task_id_empty_is_rejected(_make: Make) {
    match TaskId::new("") {
        Err(error @ StorageError::InvalidTaskId { .. }) => {
            assert!(error.to_string().contains("empty"), "{error}");
        }
        other => panic!("expected InvalidTaskId, got {other:?}"),
    }
}

pub async fn task_id_over_512_bytes_is_rejected(_make: Make) {
    assert!(
        TaskId::new("i".repeat(512)).is_ok(),
        "512 bytes are allowed"
    );
    match TaskId::new("i".repeat(513)) {
        Err(error @ StorageError::InvalidTaskId { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("513 bytes") && message.contains("512"),
                "{message}"
            );
            assert!(
                message.len() < 300,
                "a long id is shortened in the error: {message}"
            );
        }
        other => panic!("expected InvalidTaskId, got {other:?}"),
    }
}

fn small_payloads() -> StoreOptions {
    StoreOptions {
        max_payload: 64,
        ..StoreOptions::default()
    }
}

fn with_payload(name: &str, due_ms: u64, size: usize) -> NewTask {
    NewTask {
        id: id(name),
        due_ms,
        payload: Bytes::from(vec![b'p'; size]),
        traceparent: None,
    }
}

fn assert_too_large(result: Result<impl std::fmt::Debug, StorageError>, name: &str, size: usize) {
    match result {
        Err(StorageError::PayloadTooLarge {
            id,
            size: given,
            max,
        }) => {
            assert_eq!((id.as_str(), given, max), (name, size, 64));
        }
        other => panic!("expected PayloadTooLarge for {name}, got {other:?}"),
    }
}

pub async fn payload_over_max_payload_is_rejected_and_nothing_is_stored(make: Make) {
    let (store, p) = setup_with(make, small_payloads()).await;
    for mode in [ScheduleMode::Upsert, ScheduleMode::IfAbsent] {
        let result = store.schedule(&p, with_payload("big", T0, 65), mode).await;
        assert_too_large(result, "big", 65);
    }
    assert_eq!(store.get(&p, &id("big")).await.expect("get"), None);
    assert_eq!(store.stats(&p, T0).await.expect("stats").pending, 0);
}

pub async fn payload_over_max_payload_leaves_the_existing_task_alone(make: Make) {
    let (store, p) = setup_with(make, small_payloads()).await;
    schedule(&store, &p, "a", T0).await;
    let before = get(&store, &p, "a").await;
    let result = store
        .schedule(&p, with_payload("a", T0 + 5, 1_000), ScheduleMode::Upsert)
        .await;
    assert_too_large(result, "a", 1_000);
    assert_eq!(get(&store, &p, "a").await, before);
}

pub async fn payload_of_exactly_max_payload_is_accepted(make: Make) {
    let (store, p) = setup_with(make, small_payloads()).await;
    store
        .schedule(&p, with_payload("edge", T0, 64), ScheduleMode::Upsert)
        .await
        .expect("a payload of max_payload bytes");
    assert_eq!(claim_one(&store, &p, T0).await.payload.len(), 64);
}

pub async fn due_beyond_year_9999_is_rejected_and_nothing_is_stored(make: Make) {
    let (store, p) = setup(make).await;
    for due_ms in [MAX_DUE_MS + 1, u64::MAX] {
        match store
            .schedule(&p, task("far", due_ms), ScheduleMode::Upsert)
            .await
        {
            Err(error @ StorageError::InvalidDue { .. }) => {
                assert!(error.to_string().contains(&due_ms.to_string()), "{error}");
            }
            other => panic!("expected InvalidDue for {due_ms}, got {other:?}"),
        }
    }
    assert_eq!(store.get(&p, &id("far")).await.expect("get"), None);
    store
        .schedule(&p, task("far", MAX_DUE_MS), ScheduleMode::Upsert)
        .await
        .expect("the last millisecond of 9999 is allowed");
    assert_eq!(get(&store, &p, "far").await.due_ms, MAX_DUE_MS);
}

/// Found by the twin model: the backends checked a schedule's two limits in different orders.
/// The payload is checked first, in `schedule` and in each item of `schedule_many` alike.
pub async fn payload_too_large_and_due_beyond_9999_is_payload_too_large(make: Make) {
    let (store, p) = setup_with(make, small_payloads()).await;
    let both_wrong = || with_payload("both", MAX_DUE_MS + 1, 65);
    let result = store.schedule(&p, both_wrong(), ScheduleMode::Upsert).await;
    assert_too_large(result, "both", 65);
    let mut items = store
        .schedule_many(vec![(p.clone(), both_wrong())], ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert_eq!(items.len(), 1);
    assert_too_large(items.remove(0), "both", 65);
    assert_eq!(store.get(&p, &id("both")).await.expect("get"), None);
}

pub async fn task_id_with_a_nul_byte_is_rejected(_make: Make) {
    match TaskId::new("order\u{0}42") {
        Err(StorageError::InvalidTaskId { id, reason }) => {
            assert!(reason.contains("NUL"), "{reason}");
            assert!(id.contains("order"), "{id}");
        }
        other => panic!("expected InvalidTaskId, got {other:?}"),
    }
}
