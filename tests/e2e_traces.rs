//! End-to-end: trace context. With `OTEL_EXPORTER_OTLP_ENDPOINT` set, `delayq node` exports
//! each fire's span over OTLP/HTTP (decoded here with the `opentelemetry-proto` types): a
//! consumer span `process <queue>` with the OpenTelemetry messaging attributes, whose
//! `traceparent` `--handler http` sends to the receiver and `--handler exec` hands to the
//! command as `TRACEPARENT`. Without it, nothing is exported and no `traceparent` is sent.

mod common;

use std::time::Duration;

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
