//! The recurring-schedule endpoints against a real redis-server: upsert (created, unchanged,
//! updated), list and get, pause and resume, delete, every 400 naming the field and the
//! value (with nothing stored), read-only mode and the token.

mod support;

use std::time::Duration;

use delayq_engine::recurring::RawSpec;
use serde_json::{json, Value};
use support::{config, eventually, node, options, producer, redis, serve, Api, Recorder};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

fn error_of(answer: &Value) -> &str {
    answer["error"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_creates_then_unchanged_then_updated() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let spec = json!({
        "queue": "reports",
        "cron": "0 9 * * *",
        "tz": "Europe/Berlin",
        "payload": "{\"report\":\"daily\"}",
    });

    let (status, created) = api
        .call("PUT", "/v1/recurring/nightly-report", Some(spec.clone()))
        .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["name"], "nightly-report", "{created}");
    assert_eq!(created["queue"], "reports", "{created}");
    assert_eq!(created["result"], "created", "{created}");
    let next_ms = created["next_ms"].as_u64().expect("next_ms is set");
    let now = now_ms();
    assert!(
        next_ms > now && next_ms <= now + 25 * 3_600_000,
        "the next 09:00 in Berlin is within a day: {next_ms} vs {now}"
    );
    assert_eq!(next_ms % 3_600_000, 0, "09:00 Berlin is a whole UTC hour");
    let keys: Vec<&String> = created.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["name", "next_ms", "queue", "result"], "{created}");

    let (status, again) = api
        .call("PUT", "/v1/recurring/nightly-report", Some(spec.clone()))
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["result"], "unchanged", "{again}");
    assert_eq!(
        again["next_ms"], next_ms,
        "an unchanged upsert moves nothing"
    );

    let mut changed = spec.clone();
    changed["cron"] = json!("30 9 * * *");
    let (status, updated) = api
        .call("PUT", "/v1/recurring/nightly-report", Some(changed))
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["result"], "updated", "{updated}");
    let updated_next = updated["next_ms"].as_u64().expect("next_ms is set");
    assert_eq!(
        updated_next % 3_600_000,
        1_800_000,
        "09:30 Berlin: {updated}"
    );

    let one = api.ok("/v1/recurring/nightly-report").await;
    assert_eq!(one["cron"], "30 9 * * *", "{one}");
    assert_eq!(one["tz"], "Europe/Berlin", "{one}");
    assert_eq!(one["payload"], "{\"report\":\"daily\"}", "{one}");
    assert_eq!(one["next_ms"], updated_next, "{one}");
    assert_eq!(one["paused"], false, "{one}");
    assert_eq!(one["misfire"], "once", "{one}");
    assert_eq!(one["overlap"], "allow", "{one}");
    assert_eq!(one["max_catchup"], 100, "{one}");
    for key in ["fired", "skipped", "missed"] {
        assert_eq!(one[key], 0, "{key} in {one}");
    }
    // The same object as the CLI prints.
    let engine = scheduler
        .recurring("nightly-report")
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(one, delayq_http::json::recurring(&engine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_get_pause_resume_delete() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    assert_eq!(api.ok("/v1/recurring").await, json!([]));

    let start_at = now_ms() + 3_600_000;
    let (status, sweep) = api
        .call(
            "PUT",
            "/v1/recurring/sweep-carts",
            Some(json!({
                "queue": "carts",
                "every": "30s",
                "overlap": "skip",
                "misfire": "all",
                "misfire_grace": "10s",
                "max_catchup": 5,
                "start_at": start_at,
            })),
        )
        .await;
    assert_eq!(status, 200, "{sweep}");
    assert_eq!(sweep["next_ms"], start_at, "every ticks from start_at");
    let (status, nightly) = api
        .call(
            "PUT",
            "/v1/recurring/app:nightly",
            Some(json!({"queue": "reports", "cron": "@daily"})),
        )
        .await;
    assert_eq!(status, 200, "{nightly}");

    let list = api.ok("/v1/recurring").await;
    let names: Vec<&str> = list
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|schedule| schedule["name"].as_str())
        .collect();
    assert_eq!(names, ["app:nightly", "sweep-carts"], "sorted by name");
    let listed = &list[1];
    assert_eq!(listed["every"], "30s", "{listed}");
    assert_eq!(listed["every_ms"], 30_000, "{listed}");
    assert_eq!(listed["overlap"], "skip", "{listed}");
    assert_eq!(listed["misfire"], "all", "{listed}");
    assert_eq!(listed["misfire_grace"], "10s", "{listed}");
    assert_eq!(listed["max_catchup"], 5, "{listed}");
    assert_eq!(listed["start_at_ms"], start_at, "{listed}");
    assert_eq!(listed["tz"], Value::Null, "every has no zone: {listed}");
    assert_eq!(api.ok("/v1/recurring/sweep-carts").await, *listed);
    assert_eq!(list[0]["tz"], "UTC", "the default zone: {}", list[0]);

    let (status, paused) = api
        .call("POST", "/v1/recurring/app:nightly/pause", None)
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["next_ms"], Value::Null, "{paused}");
    assert_eq!(api.ok("/v1/recurring/app:nightly").await["paused"], true);
    let (status, again) = api
        .call("POST", "/v1/recurring/app:nightly/pause", None)
        .await;
    assert_eq!((status, &again["paused"]), (200, &json!(true)), "{again}");
    let (status, resumed) = api
        .call("POST", "/v1/recurring/app:nightly/resume", None)
        .await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], false, "{resumed}");
    let next = resumed["next_ms"].as_u64().expect("next_ms after resume");
    assert_eq!(next % 86_400_000, 0, "@daily is midnight UTC: {resumed}");
    assert_eq!(api.ok("/v1/recurring/app:nightly").await["paused"], false);

    let (status, deleted) = api.call("DELETE", "/v1/recurring/app:nightly", None).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted, json!({"name": "app:nightly", "deleted": true}));
    let (status, gone) = api.get("/v1/recurring/app:nightly").await;
    assert_eq!(status, 404, "{gone}");
    assert!(error_of(&gone).contains("app:nightly"), "{gone}");
    for (method, path) in [
        ("DELETE", "/v1/recurring/app:nightly"),
        ("POST", "/v1/recurring/app:nightly/pause"),
        ("POST", "/v1/recurring/app:nightly/resume"),
        ("GET", "/v1/recurring/never-was"),
    ] {
        let (status, answer) = api.call(method, path, None).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    let names: Vec<Value> = api
        .ok("/v1/recurring")
        .await
        .as_array()
        .expect("an array")
        .iter()
        .map(|schedule| schedule["name"].clone())
        .collect();
    assert_eq!(names, [json!("sweep-carts")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_are_400_naming_the_field_and_store_nothing() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let start = now_ms() + 3_600_000;
    let cases = [
        (
            "bad-cron",
            json!({"queue": "q", "cron": "61 * * * *"}),
            &["cron", "61 * * * *"][..],
        ),
        (
            "bad-zone",
            json!({"queue": "q", "cron": "0 9 * * *", "tz": "Mars/Olympus_Mons"}),
            &["tz", "Mars/Olympus_Mons"],
        ),
        (
            "too-fast",
            json!({"queue": "q", "every": "500ms"}),
            &["every", "500ms"],
        ),
        (
            "bad-window",
            json!({"queue": "q", "every": "1m", "start_at": start, "end_at": start - 60_000}),
            &["end_at", &(start - 60_000).to_string()],
        ),
        (
            "typo",
            json!({"queue": "q", "cron": "@hourly", "cronn": "@daily"}),
            &["cronn"],
        ),
        ("no-cadence", json!({"queue": "q"}), &["cron", "every"]),
        (
            "bad-queue",
            json!({"queue": "a queue", "every": "1m"}),
            &["queue", "a queue"],
        ),
        (
            "both",
            json!({"queue": "q", "every": "1m", "cron": "@daily"}),
            &["every", "cron"],
        ),
        (
            "bad-catchup",
            json!({"queue": "q", "every": "1m", "misfire": "all", "max_catchup": 0}),
            &["max_catchup", "0"],
        ),
        (
            "bad-misfire",
            json!({"queue": "q", "every": "1m", "misfire": "sometimes"}),
            &["misfire", "sometimes"],
        ),
        (
            "wrong-type",
            json!({"queue": "q", "every": 60}),
            &["'every'", "60", "expected a string"],
        ),
        (
            "negative",
            json!({"queue": "q", "every": "1m", "max_catchup": -1}),
            &["'max_catchup'", "-1"],
        ),
    ];
    for (name, body, needles) in cases {
        let (status, answer) = api
            .call("PUT", &format!("/v1/recurring/{name}"), Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{name} {body}: {answer}");
        let error = error_of(&answer);
        for needle in needles {
            assert!(error.contains(needle), "{name}: {needle:?} in {error:?}");
        }
        let (status, _) = api.get(&format!("/v1/recurring/{name}")).await;
        assert_eq!(status, 404, "{name}: nothing stored");
    }

    // A name with '@' (it separates the name from the tick in a tick's task id).
    let (status, answer) = api
        .call(
            "PUT",
            "/v1/recurring/user@example",
            Some(json!({"queue": "q", "every": "1m"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let error = error_of(&answer);
    assert!(
        error.contains("name") && error.contains("user@example"),
        "{error}"
    );
    for (method, path) in [
        ("GET", "/v1/recurring/user@example"),
        ("DELETE", "/v1/recurring/user@example"),
        ("POST", "/v1/recurring/user@example/pause"),
    ] {
        let (status, answer) = api.call(method, path, None).await;
        assert_eq!(status, 400, "{method} {path}: {answer}");
        assert!(error_of(&answer).contains("user@example"), "{answer}");
    }
    let too_long = "n".repeat(129);
    let (status, answer) = api
        .call(
            "PUT",
            &format!("/v1/recurring/{too_long}"),
            Some(json!({"queue": "q", "every": "1m"})),
        )
        .await;
    assert_eq!(status, 400, "{answer}");

    // Not a JSON object at all.
    let (status, answer) = api
        .call("PUT", "/v1/recurring/nothing", Some(json!(["q"])))
        .await;
    assert_eq!(status, 400, "{answer}");
    let response = api
        .client
        .put(format!("{}/v1/recurring/empty", api.base))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 400);

    assert_eq!(api.ok("/v1/recurring").await, json!([]), "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_refuses_changes_and_the_token_is_required() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let spec = RawSpec {
        queue: Some("reports".into()),
        cron: Some("0 9 * * *".into()),
        ..RawSpec::default()
    }
    .validate()
    .expect("a valid spec");
    scheduler
        .set_recurring("nightly", spec)
        .await
        .expect("set the schedule");
    let body = json!({"queue": "reports", "every": "1m"});

    let mut read_only = options(&scheduler);
    read_only.read_only = true;
    let api = Api::new(serve(&scheduler, read_only).await);
    assert_eq!(api.get("/v1/recurring").await.0, 200);
    assert_eq!(api.ok("/v1/recurring/nightly").await["paused"], false);
    for (method, path) in [
        ("PUT", "/v1/recurring/nightly"),
        ("PUT", "/v1/recurring/other"),
        ("DELETE", "/v1/recurring/nightly"),
        ("POST", "/v1/recurring/nightly/pause"),
        ("POST", "/v1/recurring/nightly/resume"),
    ] {
        let (status, answer) = api.call(method, path, Some(body.clone())).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(error_of(&answer).contains("read-only"), "{answer}");
    }
    let still = api.ok("/v1/recurring/nightly").await;
    assert_eq!(
        (&still["cron"], &still["paused"]),
        (&json!("0 9 * * *"), &json!(false)),
        "nothing changed: {still}"
    );
    assert_eq!(api.get("/v1/recurring/other").await.0, 404);

    let mut guarded = options(&scheduler);
    guarded.token = Some("s3cret-token".to_owned());
    let api = Api::new(serve(&scheduler, guarded).await);
    for (method, path) in [
        ("GET", "/v1/recurring"),
        ("GET", "/v1/recurring/nightly"),
        ("PUT", "/v1/recurring/other"),
        ("DELETE", "/v1/recurring/nightly"),
        ("POST", "/v1/recurring/nightly/pause"),
    ] {
        for client in [api.clone(), api.with_token("wrong")] {
            let (status, answer) = client.call(method, path, Some(body.clone())).await;
            assert_eq!(status, 401, "{method} {path}: {answer}");
            assert!(error_of(&answer).contains("token"), "{answer}");
        }
    }
    let authed = api.with_token("s3cret-token");
    let (status, paused) = authed
        .call("POST", "/v1/recurring/nightly/pause", None)
        .await;
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    let (status, set) = authed
        .call("PUT", "/v1/recurring/other", Some(body.clone()))
        .await;
    assert_eq!((status, &set["result"]), (200, &json!("created")), "{set}");
    let names: Vec<Value> = authed
        .ok("/v1/recurring")
        .await
        .as_array()
        .expect("an array")
        .iter()
        .map(|schedule| schedule["name"].clone())
        .collect();
    assert_eq!(names, [json!("nightly"), json!("other")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fires_ticks_that_the_task_api_finds() {
    let server = redis();
    let config = config(&server.url());
    let recorder = Recorder::default();
    let scheduler = node(&config, &recorder).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let (status, set) = api
        .call(
            "PUT",
            "/v1/recurring/heartbeat",
            Some(json!({"queue": "beats", "every": "1s", "payload": "ping"})),
        )
        .await;
    assert_eq!(status, 200, "{set}");
    let schedule = eventually(Duration::from_secs(20), "two fired ticks", || {
        let api = api.clone();
        async move {
            let schedule = api.ok("/v1/recurring/heartbeat").await;
            (schedule["fired"].as_u64().unwrap_or(0) >= 2).then_some(schedule)
        }
    })
    .await;
    let last_tick = schedule["last_tick_ms"]
        .as_u64()
        .expect("last_tick_ms after a tick");
    assert!(
        schedule["last_fired_ms"].is_u64(),
        "last_fired_ms: {schedule}"
    );
    let id = format!("heartbeat@{last_tick}");
    let task = api.ok(&format!("/v1/queues/beats/tasks/{id}")).await;
    assert_eq!(task["id"], id.as_str(), "{task}");
    assert_eq!(task["payload"], "ping", "{task}");
    let run = eventually(Duration::from_secs(10), "the handler to run a tick", || {
        let runs = recorder.runs.clone();
        async move {
            runs.lock()
                .iter()
                .find(|task| task.id.starts_with("heartbeat@"))
                .cloned()
        }
    })
    .await;
    assert_eq!(&run.payload[..], b"ping");

    let (status, _) = api.call("DELETE", "/v1/recurring/heartbeat", None).await;
    assert_eq!(status, 200);
    scheduler.shutdown().await.expect("shutdown");
}
