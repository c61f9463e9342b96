//! The process's logs and traces: log lines on stderr (filtered by `RUST_LOG`), and, when
//! the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
//! set, the spans of delayq's crates exported over OTLP/HTTP (protobuf) through
//! tracing-opentelemetry, configured by the other standard `OTEL_*` variables
//! (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_BSP_SCHEDULE_DELAY`, ...). Unset, no OpenTelemetry layer is installed at all: the
//! fire's span stays disabled, as before, and costs nothing.

use std::io::IsTerminal;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Key;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The variables whose presence turns the export on.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` gives one.
const DEFAULT_SERVICE_NAME: &str = "delayq";

/// What [`init`] set up; [`Telemetry::shutdown`] flushes the spans not exported yet.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is still buffered (bounded by the exporter's timeout) and stops.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(error) = provider.shutdown() {
                tracing::warn!(%error, "could not export the last spans over OTLP");
            }
        }
    }
}

/// Installs the logging (stderr, `RUST_LOG` else `default_level`) and, when `export_spans`
/// and an OTLP endpoint is configured, the span export.
pub fn init(default_level: &str, export_spans: bool) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let (provider, problem) = if export_spans && endpoint_configured() {
        match otlp_provider() {
            Ok(provider) => (Some(provider), None),
            Err(error) => (None, Some(error)),
        }
    } else {
        (None, None)
    };
    let Some(provider) = provider else {
        // Exactly the logging of a build without tracing: one global filter, no per-layer
        // filtering, so nothing costs more per fired task than before.
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
        if let Some(problem) = problem {
            tracing::warn!(error = %problem, "OTLP span export is configured but could not start; running without it");
        }
        return Telemetry { provider: None };
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    // delayq's own spans (the fire's is at debug level) and the events inside them, which
    // become the span's events; nothing of the other crates.
    let targets = Targets::new()
        .with_target("delayq_engine", Level::DEBUG)
        .with_target("delayq_http", Level::DEBUG)
        .with_target("delayq", Level::DEBUG);
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("delayq"))
        .with_filter(targets);
    tracing_subscriber::registry().with(logs).with(spans).init();
    tracing::info!("exporting spans over OTLP");
    Telemetry {
        provider: Some(provider),
    }
}

/// Whether an OTLP endpoint is set (and the SDK not disabled by `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none`).
fn endpoint_configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let is = |name: &str, wanted: &str| {
        std::env::var(name).is_ok_and(|value| value.trim().eq_ignore_ascii_case(wanted))
    };
    ENDPOINT_VARIABLES.iter().any(|name| set(name))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
}

/// The tracer provider: OTLP/HTTP protobuf with the batch processor (its own thread).
fn otlp_provider() -> Result<SdkTracerProvider, String> {
    // reqwest is built without a TLS crypto provider of its own (an https endpoint).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|error| error.to_string())?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build())
}

/// The resource from the `OTEL_*` variables, named [`DEFAULT_SERVICE_NAME`] unless they name
/// the service.
fn resource() -> Resource {
    let resource = Resource::builder().build();
    let unnamed = resource
        .get(&Key::from_static_str("service.name"))
        .is_none_or(|name| name.as_str().starts_with("unknown_service"));
    if unnamed {
        Resource::builder()
            .with_service_name(DEFAULT_SERVICE_NAME)
            .build()
    } else {
        resource
    }
}

/// The W3C `traceparent` of the current span (inside a handler: the fire's), when spans are
/// exported; `None` otherwise.
pub fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        )
    })
}
