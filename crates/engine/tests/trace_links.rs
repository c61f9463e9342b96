//! In the library, a schedule made inside a span that a tracing-opentelemetry layer records
//! stores that span's context (or the one given with `ScheduleRequest::with_traceparent`), and
//! the fire's span, a consumer span `process <queue>`, links to it; a schedule outside any
//! recorded span links to nothing. On the memory twin: the storage of the trace is the
//! conformance suite's (`traces` group), this is the engine's half.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayq_engine::{ScheduleRequest, TraceParent, When};
use opentelemetry::trace::{SpanKind, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use support::{fast_config, wait_until, Recorder, TestBackend};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// Keeps every exported span.
#[derive(Clone, Debug, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().expect("spans lock").extend(batch);
        Ok(())
    }
}

impl Collected {
    fn fire_of(&self, id: &str) -> Option<SpanData> {
        self.0
            .lock()
            .expect("spans lock")
            .iter()
            .find(|span| {
                span.name.starts_with("process ")
                    && span.attributes.iter().any(|kv| {
                        kv.key.as_str() == "messaging.message.id" && kv.value.as_str() == id
                    })
            })
            .cloned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fire_links_to_the_span_that_scheduled_it() {
    let spans = Collected::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("test"))
        .with_filter(
            Targets::new()
                .with_target("delayq_engine::dispatch", tracing::Level::DEBUG)
                .with_target("trace_links", tracing::Level::INFO),
        );
    // Global: the fires run on the runtime's worker threads.
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .expect("the only subscriber of this test binary");

    let backend = TestBackend::memory();
    let recorder = Recorder::new();
    let node = backend
        .builder(&fast_config())
        .handler("orders", recorder.handler())
        .start()
        .await
        .expect("node starts");
    let soon = || When::In(Duration::from_millis(100));

    let checkout = tracing::info_span!("checkout");
    let checkout_context = checkout.context().span().span_context().clone();
    assert!(checkout_context.is_valid(), "the test's span is recorded");
    node.schedule("orders", "from-span", soon(), "")
        .instrument(checkout)
        .await
        .expect("schedule");
    let explicit = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .expect("valid");
    node.schedule_request(
        "orders",
        ScheduleRequest::new("explicit", soon(), "").with_traceparent(Some(explicit.clone())),
    )
    .await
    .expect("schedule");
    node.schedule("orders", "untraced", soon(), "")
        .await
        .expect("schedule");

    wait_until(Duration::from_secs(20), "every fire's span ended", || {
        ["from-span", "explicit", "untraced"]
            .iter()
            .all(|id| spans.fire_of(id).is_some())
    })
    .await;
    let linked = spans.fire_of("from-span").expect("exported");
    assert_eq!(linked.span_kind, SpanKind::Consumer);
    assert_eq!(linked.name, "process orders");
    let links: Vec<_> = linked
        .links
        .iter()
        .map(|link| link.span_context.clone())
        .collect();
    assert_eq!(
        links
            .iter()
            .map(|c| (c.trace_id(), c.span_id()))
            .collect::<Vec<_>>(),
        [(checkout_context.trace_id(), checkout_context.span_id())],
        "linked to the checkout span"
    );
    let explicit_fire = spans.fire_of("explicit").expect("exported");
    let explicit_links: Vec<String> = explicit_fire
        .links
        .iter()
        .map(|link| {
            format!(
                "{}-{}",
                link.span_context.trace_id(),
                link.span_context.span_id()
            )
        })
        .collect();
    assert_eq!(
        explicit_links,
        [format!("{}-{}", explicit.trace_id(), explicit.parent_id())]
    );
    assert!(spans
        .fire_of("untraced")
        .expect("exported")
        .links
        .is_empty());
    assert_eq!(recorder.distinct(), 3);
    node.shutdown().await.expect("shutdown");
    let _ = provider.shutdown();
}
