//! End-to-end: trace context. With `OTEL_EXPORTER_OTLP_ENDPOINT` set, `delayq node` exports
//! each fire's span over OTLP/HTTP (decoded here with the `opentelemetry-proto` types): a
//! consumer span `process <queue>` with the OpenTelemetry messaging attributes, whose
//! `traceparent` `--handler http` sends to the receiver and `--handler exec` hands to the
//! command as `TRACEPARENT`, and which links to the trace that scheduled the task (an HTTP
//! request's `traceparent` header to another process, `delayq serve`, or `delayq schedule
//! --traceparent`). Without it, nothing is exported and no `traceparent` is sent.

mod common;
mod e2e_http_support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::recorder::{self, Answer, Recorded, Requests};
use common::{wait_until, Env, NodeProcess};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const QUEUES: &str = "\
queue_defaults:
  partitions: 4
  timeout: 5s
";

/// An OTLP/HTTP collector: answers each export with an empty success.
fn start_collector() -> (String, Requests) {
    recorder::start(|_, _| Answer {
        status: "200 OK",
        headers: "content-type: application/x-protobuf\r\n".to_owned(),
        body: ExportTraceServiceResponse::default().encode_to_vec(),
    })
}

/// A webhook receiver that acks everything.
fn start_receiver() -> (String, Requests) {
    let (url, requests) = recorder::start(|_, _| Answer::ok(b"ok"));
    (format!("{url}/hook"), requests)
}

/// A span the node exported, with its resource's service name.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    span: Span,
}

impl Exported {
    fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }

    /// `00-<trace id>-<span id>-01`, as the span's child would be told.
    fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-01",
            hex(&self.span.trace_id),
            hex(&self.span.span_id)
        )
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        AnyValue::BoolValue(flag) => Some(flag.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Every span of every export so far.
fn exported_spans(collector: &Requests) -> Vec<Exported> {
    let requests: Vec<Recorded> = collector.lock().expect("collector lock").clone();
    let mut spans = Vec::new();
    for request in requests {
        assert!(
            request.line.starts_with("POST /v1/traces "),
            "an OTLP/HTTP trace export: {}",
            request.line
        );
        let export = ExportTraceServiceRequest::decode(request.body.as_slice())
            .expect("an OTLP protobuf export");
        for resource_spans in export.resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| attribute(&resource.attributes, "service.name"))
                .unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                for span in scope_spans.spans {
                    spans.push(Exported {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
    }
    spans
}

/// The fire span of `queue`/`id`, waiting up to 20 s for its export.
fn wait_for_fire_span(collector: &Requests, queue: &str, id: &str) -> Exported {
    let find = || {
        exported_spans(collector).into_iter().find(|exported| {
            exported.attribute("messaging.destination.name").as_deref() == Some(queue)
                && exported.attribute("messaging.message.id").as_deref() == Some(id)
        })
    };
    wait_until(
        Duration::from_secs(20),
        &format!("the fire span of {queue}/{id}"),
        || find().is_some(),
        || format!("exported: {:?}", exported_spans(collector)),
    );
    find().expect("found")
}

/// `delayq node` with its spans going to `collector` (exported every 100 ms).
fn spawn_traced_node(env: &Env, collector: &str, args: &[&str]) -> NodeProcess {
    let mut command = env.command(&["node"]);
    command
        .args(args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_SERVICE_NAME", "delayq-e2e")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let node = NodeProcess::spawn("traced", command);
    node.wait_for_stderr("exporting spans over OTLP", Duration::from_secs(5));
    env.wait_for_members(1);
    node
}

fn assert_fire_span(fire: &Exported, queue: &str, id: &str) {
    assert_eq!(fire.service, "delayq-e2e", "{fire:?}");
    assert_eq!(fire.span.name, format!("process {queue}"), "{fire:?}");
    assert_eq!(fire.span.kind, SpanKind::Consumer as i32, "{fire:?}");
    for (key, value) in [
        ("messaging.system", "delayq"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", queue),
        ("messaging.message.id", id),
        ("messaging.delayq.attempt", "1"),
    ] {
        assert_eq!(
            fire.attribute(key).as_deref(),
            Some(value),
            "{key} of {fire:?}"
        );
    }
}

#[test]
fn the_fire_span_is_exported_and_its_traceparent_sent_with_the_webhook() {
    let env = Env::start(QUEUES);
    let (collector_url, collector) = start_collector();
    let (hook_url, hooks) = start_receiver();
    let _node = spawn_traced_node(
        &env,
        &collector_url,
        &["--handler", "http", "--url", &hook_url],
    );
    env.json(&["schedule", "hooks", "traced-1", "--in", "100ms"]);

    let fire = wait_for_fire_span(&collector, "hooks", "traced-1");
    assert_fire_span(&fire, "hooks", "traced-1");
    assert!(fire.span.links.is_empty(), "scheduled untraced: {fire:?}");
    let hooks = hooks.lock().expect("hooks lock").clone();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(
        hooks[0].headers.get("traceparent"),
        Some(&fire.traceparent()),
        "the receiver's trace continues under the fire's span"
    );
}

#[test]
fn exec_gets_the_fire_span_as_traceparent() {
    let env = Env::start(QUEUES);
    let (collector_url, collector) = start_collector();
    let out = env.dir.path().join("traceparents");
    let script = format!("echo \"$DELAYQ_ID $TRACEPARENT\" >> '{}'", out.display());
    let _node = spawn_traced_node(
        &env,
        &collector_url,
        &["--handler", "exec", "--", "sh", "-c", &script],
    );
    env.json(&["schedule", "jobs", "traced-2", "--in", "100ms"]);
    let fire = wait_for_fire_span(&collector, "jobs", "traced-2");
    assert_fire_span(&fire, "jobs", "traced-2");
    let written = std::fs::read_to_string(&out).expect("the command ran");
    assert_eq!(written.trim(), format!("traced-2 {}", fire.traceparent()));
}

#[test]
fn without_an_otlp_endpoint_nothing_is_exported_and_no_traceparent_sent() {
    let env = Env::start(QUEUES);
    let (hook_url, hooks) = start_receiver();
    let mut command = env.command(&["node", "--handler", "http", "--url", &hook_url]);
    // Even a TRACEPARENT in the node's own environment is nobody's parent.
    command.env(
        "TRACEPARENT",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    );
    let node = NodeProcess::spawn("untraced", command);
    env.wait_for_members(1);
    env.json(&["schedule", "hooks", "plain-1", "--in", "100ms"]);
    wait_until(
        Duration::from_secs(20),
        "the webhook",
        || !hooks.lock().expect("hooks lock").is_empty(),
        || node.stderr_text(),
    );
    let hooks = hooks.lock().expect("hooks lock").clone();
    assert_eq!(hooks[0].headers.get("traceparent"), None, "{hooks:?}");
    assert!(
        !node.stderr_text().contains("OTLP"),
        "{}",
        node.stderr_text()
    );
}

/// A fresh W3C traceparent: `(header value, trace id hex, span id hex)`.
fn new_traceparent(salt: u64) -> (String, String, String) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64;
    let trace_id = format!(
        "{nanos:016x}{:016x}",
        salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
    );
    let span_id = format!("{:016x}", nanos ^ salt | 1);
    (format!("00-{trace_id}-{span_id}-01"), trace_id, span_id)
}

/// `method url` with a JSON body and a `traceparent` header; the status.
fn call_with_traceparent(
    method: &str,
    url: &str,
    body: serde_json::Value,
    traceparent: &str,
) -> u16 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the HTTP client");
    runtime.block_on(async {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        reqwest::Client::new()
            .request(method, url)
            .header("traceparent", traceparent)
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .expect("the API answers")
            .status()
            .as_u16()
    })
}

/// Whether `fire` links to the span `(trace id, span id)`.
fn links_to(fire: &Exported, trace_id: &str, span_id: &str) -> bool {
    fire.span
        .links
        .iter()
        .any(|link| hex(&link.trace_id) == trace_id && hex(&link.span_id) == span_id)
}

#[test]
fn the_fire_links_to_the_trace_that_scheduled_it_from_another_process() {
    let env = Env::start(QUEUES);
    let (collector_url, collector) = start_collector();
    let (hook_url, hooks) = start_receiver();
    // The node fires; `delayq serve` (an API tier) and `delayq schedule` schedule.
    let _node = spawn_traced_node(
        &env,
        &collector_url,
        &["--handler", "http", "--url", &hook_url],
    );
    let serve = e2e_http_support::Serve::start(&env, &["--listen", "127.0.0.1:0"], &[]);
    let (put, put_trace, put_span) = new_traceparent(1);
    let status = call_with_traceparent(
        "PUT",
        &format!("{}/v1/queues/hooks/tasks/linked-put", serve.url),
        serde_json::json!({ "delay_ms": 300 }),
        &put,
    );
    assert_eq!(status, 200);
    let (bulk, bulk_trace, bulk_span) = new_traceparent(2);
    let status = call_with_traceparent(
        "POST",
        &format!("{}/v1/queues/hooks/tasks", serve.url),
        serde_json::json!([{ "id": "linked-bulk", "delay_ms": 300 }]),
        &bulk,
    );
    assert_eq!(status, 200);
    let (cli, cli_trace, cli_span) = new_traceparent(3);
    env.json(&[
        "schedule",
        "hooks",
        "linked-cli",
        "--in",
        "300ms",
        "--traceparent",
        &cli,
    ]);

    for (id, trace_id, span_id) in [
        ("linked-put", &put_trace, &put_span),
        ("linked-bulk", &bulk_trace, &bulk_span),
        ("linked-cli", &cli_trace, &cli_span),
    ] {
        let fire = wait_for_fire_span(&collector, "hooks", id);
        assert_fire_span(&fire, "hooks", id);
        assert!(
            links_to(&fire, trace_id, span_id),
            "{id}: the fire's span links to the schedule's {trace_id}/{span_id}: {:?}",
            fire.span.links
        );
        assert_ne!(hex(&fire.span.trace_id), *trace_id, "a link, not a parent");
        let hook = hooks
            .lock()
            .expect("hooks lock")
            .iter()
            .find(|hook| {
                serde_json::from_slice::<serde_json::Value>(&hook.body)
                    .is_ok_and(|body| body["id"] == id)
            })
            .cloned()
            .expect("the webhook");
        assert_eq!(hook.headers.get("traceparent"), Some(&fire.traceparent()));
    }

    // A malformed traceparent is ignored: the task is scheduled, its fire links to nothing.
    let status = call_with_traceparent(
        "PUT",
        &format!("{}/v1/queues/hooks/tasks/badly-traced", serve.url),
        serde_json::json!({ "delay_ms": 100 }),
        "00-not-a-trace-01",
    );
    assert_eq!(status, 200);
    let fire = wait_for_fire_span(&collector, "hooks", "badly-traced");
    assert!(fire.span.links.is_empty(), "{fire:?}");
    // The command line refuses one, naming the value.
    let output = env.run(&[
        "schedule",
        "hooks",
        "x",
        "--in",
        "1s",
        "--traceparent",
        "00-nope",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("invalid traceparent \"00-nope\""),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn schedule_from_takes_each_lines_traceparent_and_get_shows_what_was_stored() {
    let env = Env::start(QUEUES);
    let (own, own_trace, own_span) = new_traceparent(11);
    let (default, default_trace, default_span) = new_traceparent(12);
    let lines = [
        format!(r#"{{"id":"own","delay_ms":300,"traceparent":"{own}"}}"#),
        r#"{"id":"default","delay_ms":300}"#.to_owned(),
        r#"{"id":"bad","delay_ms":300,"traceparent":"00-not-a-trace-01"}"#.to_owned(),
        r#"{"id":"wrong-type","delay_ms":300,"traceparent":7}"#.to_owned(),
        r#"{"id":"null","delay_ms":300,"traceparent":null}"#.to_owned(),
    ]
    .join("\n");
    // No node yet: the tasks wait, so `get` sees them pending.
    let output = env.run_with_stdin(
        &[
            "schedule",
            "hooks",
            "--from",
            "-",
            "--traceparent",
            &default,
        ],
        lines.as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "some lines failed: {stderr}");
    assert_eq!(
        common::parse_json(&output.stdout),
        serde_json::json!({"scheduled": 3, "replaced": 0, "duplicates": 0, "kept": 0, "failed": 2}),
        "{stderr}"
    );
    // A bad one refuses its line alone, naming the line, the field and the value.
    let line = |number: u32| {
        stderr
            .lines()
            .find(|line| line.starts_with(&format!("error: line {number}: ")))
            .unwrap_or_else(|| panic!("line {number} is reported: {stderr}"))
    };
    assert!(
        line(3).contains("\"traceparent\"") && line(3).contains("\"00-not-a-trace-01\""),
        "{stderr}"
    );
    assert!(
        line(4).contains("\"traceparent\"") && line(4).contains("got 7"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("error: line").count(), 2, "{stderr}");

    for (id, expected) in [("own", &own), ("default", &default), ("null", &default)] {
        let task = env.json(&["get", "hooks", id]);
        assert_eq!(task["traceparent"], expected.as_str(), "{id}: {task}");
    }
    assert_eq!(env.run(&["get", "hooks", "bad"]).status.code(), Some(1));
    // Without --traceparent a line without one is untraced; the one-task form is shown too.
    let plain = r#"{"id":"plain","delay_ms":3600000}"#;
    let summary = env.run_with_stdin(&["schedule", "hooks", "--from", "-"], plain.as_bytes());
    assert_eq!(common::parse_json(&summary.stdout)["scheduled"], 1);
    assert_eq!(
        env.json(&["get", "hooks", "plain"])["traceparent"],
        serde_json::Value::Null
    );
    let (single, _, _) = new_traceparent(13);
    env.json(&[
        "schedule",
        "hooks",
        "single",
        "--in",
        "1h",
        "--traceparent",
        &single,
    ]);
    assert_eq!(
        env.json(&["get", "hooks", "single"])["traceparent"],
        single.as_str()
    );

    // Fired, each links to the trace its line gave (or the command's default).
    let (collector_url, collector) = start_collector();
    let (hook_url, _hooks) = start_receiver();
    let _node = spawn_traced_node(
        &env,
        &collector_url,
        &["--handler", "http", "--url", &hook_url],
    );
    for (id, trace_id, span_id) in [
        ("own", &own_trace, &own_span),
        ("default", &default_trace, &default_span),
        ("null", &default_trace, &default_span),
    ] {
        let fire = wait_for_fire_span(&collector, "hooks", id);
        assert!(
            links_to(&fire, trace_id, span_id),
            "{id}: links to {trace_id}/{span_id}: {:?}",
            fire.span.links
        );
    }
}
