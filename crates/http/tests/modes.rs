//! Schedule modes and time inputs over HTTP, against a real redis-server: `"mode"` in the PUT
//! body and in each bulk item, a bad mode, `"at"` with an offset, epoch seconds refused.

mod support;

use serde_json::{json, Value};
use support::{config, options, producer, redis, serve, Api};

/// Due times far ahead (2100-01-01 and an hour either side), so nothing fires meanwhile.
const LIVE: u64 = 4_102_444_800_000;
const EARLIER: u64 = LIVE - 3_600_000;
const LATER: u64 = LIVE + 3_600_000;

async fn put(api: &Api, id: &str, body: Value) -> Value {
    let (status, answer) = api
        .call("PUT", &format!("/v1/queues/modes/tasks/{id}"), Some(body))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_honours_each_mode_and_reports_kept() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);

    // (mode, new due, due after, payload after, kept)
    let cases = [
        (None, EARLIER, EARLIER, "second", false),
        (Some("replace"), LATER, LATER, "second", false),
        (Some("if_absent"), EARLIER, LIVE, "first", true),
        (Some("earlier"), EARLIER, EARLIER, "second", false),
        (Some("earlier"), LATER, LIVE, "first", true),
        (Some("later"), EARLIER, LIVE, "first", true),
        (Some("later"), LATER, LATER, "second", false),
    ];
    for (n, (mode, due, due_after, payload_after, kept)) in cases.into_iter().enumerate() {
        let id = format!("t-{n}");
        let created = put(&api, &id, json!({"due_ms": LIVE, "payload": "first"})).await;
        assert_eq!(created["kept"], false, "{created}");
        let mut body = json!({"due_ms": due, "payload": "second"});
        if let Some(mode) = mode {
            body["mode"] = json!(mode);
        }
        let answer = put(&api, &id, body).await;
        let what = format!("{mode:?} at {due}: {answer}");
        assert_eq!(answer["kept"], kept, "{what}");
        assert_eq!(answer["replaced"], !kept, "{what}");
        assert_eq!(answer["duplicate"], false, "{what}");
        assert_eq!(answer["due_ms"], due_after, "{what}");
        let task = api.ok(&format!("/v1/queues/modes/tasks/{id}")).await;
        assert_eq!(
            (task["due_ms"].clone(), task["payload"].clone()),
            (json!(due_after), json!(payload_after)),
            "{what}: {task}"
        );
    }

    // No live task: created in every mode.
    for mode in ["replace", "if_absent", "earlier", "later"] {
        let answer = put(
            &api,
            &format!("new-{mode}"),
            json!({"due_ms": LIVE, "mode": mode}),
        )
        .await;
        assert_eq!(
            (answer["replaced"].clone(), answer["kept"].clone()),
            (json!(false), json!(false)),
            "{mode}: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_mode_is_a_400_naming_the_value() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    for mode in [json!("sooner"), json!("REPLACE")] {
        let (status, answer) = api
            .call(
                "PUT",
                "/v1/queues/modes/tasks/a",
                Some(json!({"delay_ms": 1000, "mode": mode})),
            )
            .await;
        assert_eq!(status, 400, "{answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("mode") && error.contains(&format!("{mode}")),
            "{answer}"
        );
    }
    let (status, answer) = api
        .call(
            "PUT",
            "/v1/queues/modes/tasks/a",
            Some(json!({"delay_ms": 1000, "mode": 3})),
        )
        .await;
    assert_eq!(status, 400, "a mode that is not a string: {answer}");
    assert_eq!(
        api.get("/v1/queues/modes/tasks/a").await.0,
        404,
        "nothing was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_items_carry_their_own_mode() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let items = json!([
        {"id": "a", "due_ms": LIVE, "payload": "first"},
        {"id": "b", "due_ms": LIVE, "payload": "first"},
        {"id": "c", "due_ms": LIVE, "payload": "first"},
    ]);
    let (status, summary) = api
        .call("POST", "/v1/queues/modes/tasks", Some(items))
        .await;
    assert_eq!((status, summary["scheduled"].clone()), (200, json!(3)));

    let items = json!([
        {"id": "a", "due_ms": EARLIER, "payload": "second", "mode": "earlier"},
        {"id": "b", "due_ms": EARLIER, "payload": "second", "mode": "later"},
        {"id": "c", "due_ms": LATER, "payload": "second", "mode": "if_absent"},
        {"id": "c", "due_ms": LATER, "payload": "third"},
        {"id": "e", "due_ms": LATER, "mode": "later"},
    ]);
    let (status, summary) = api
        .call("POST", "/v1/queues/modes/tasks", Some(items))
        .await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["scheduled"], 3, "a, the second c and e: {summary}");
    assert_eq!(summary["replaced"], 2, "{summary}");
    assert_eq!(summary["kept"], 2, "b and the first c: {summary}");
    assert_eq!(summary["failed"], 0, "{summary}");

    // A bad mode is a malformed item: the whole body is refused, naming it.
    let items = json!([
        {"id": "d", "due_ms": LATER, "mode": "nope"},
    ]);
    let (status, error) = api
        .call("POST", "/v1/queues/modes/tasks", Some(items))
        .await;
    assert_eq!(status, 400, "{error}");
    let error = error["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("\"nope\"") && error.contains("index 0"),
        "{error}"
    );

    for (id, due, payload) in [
        ("a", EARLIER, "second"),
        ("b", LIVE, "first"),
        ("c", LATER, "third"),
        ("e", LATER, ""),
    ] {
        let task = api.ok(&format!("/v1/queues/modes/tasks/{id}")).await;
        assert_eq!(
            (task["due_ms"].clone(), task["payload"].clone()),
            (json!(due), json!(payload)),
            "{id}: {task}"
        );
    }
    assert_eq!(api.get("/v1/queues/modes/tasks/d").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_takes_any_offset_and_refuses_seconds() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let answer = put(&api, "berlin", json!({"at": "2100-01-01T02:00:00+02:00"})).await;
    assert_eq!(answer["due_ms"], LIVE, "{answer}");
    let answer = put(&api, "utc", json!({"at": "2100-01-01T00:00:00Z"})).await;
    assert_eq!(answer["due_ms"], LIVE, "{answer}");

    let (status, answer) = api
        .call(
            "PUT",
            "/v1/queues/modes/tasks/seconds",
            Some(json!({"at": "4102444800"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("\"4102444800\"")
            && error.contains("looks like seconds since the epoch")
            && error.contains("4102444800000"),
        "{answer}"
    );
    let items = json!([{"id": "ms", "at": "4102444800000"}, {"id": "s", "at": "4102444800"}]);
    let (status, error) = api
        .call("POST", "/v1/queues/modes/tasks", Some(items))
        .await;
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]
        .as_str()
        .is_some_and(|error| error.contains("looks like seconds") && error.contains("index 1")));

    // due_ms follows the same rule as --at: epoch seconds are refused with the hint.
    let (status, answer) = api
        .call(
            "PUT",
            "/v1/queues/modes/tasks/seconds",
            Some(json!({"due_ms": 1_900_000_000u64})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("due_ms 1900000000")
            && error.contains("looks like seconds since the epoch")
            && error.contains("1900000000000"),
        "{answer}"
    );
}
