//! Trace context between a schedule and its fire: the caller's W3C `traceparent` (explicit,
//! or the current `tracing` span's OpenTelemetry context through tracing-opentelemetry) is
//! stored with the task, and the fire's span links to it.

use delayq_storage::TraceParent;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The current `tracing` span's OpenTelemetry context as a `traceparent`, when a
/// tracing-opentelemetry layer records that span; `None` otherwise (at no cost beyond a
/// look at the current span).
pub(crate) fn current_traceparent() -> Option<TraceParent> {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_ref = context.span();
    let span_context = span_ref.span_context();
    if !span_context.is_valid() {
        return None;
    }
    TraceParent::parse(&format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8()
    ))
    .ok()
}

/// Links `span` (a fire's) to the trace that scheduled it, when the span is recorded.
pub(crate) fn link_to_schedule(span: &tracing::Span, parent: &TraceParent) {
    if span.is_disabled() {
        return;
    }
    if let Some(context) = span_context_of(parent) {
        span.add_link(context);
    }
}

/// The remote span context a `traceparent` names.
fn span_context_of(parent: &TraceParent) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(parent.trace_id()).ok()?;
    let span_id = SpanId::from_hex(parent.parent_id()).ok()?;
    let flags = u8::from_str_radix(parent.flags(), 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_as_a_remote_span_context() {
        let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        let context = span_context_of(&parent).expect("valid");
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled() && context.is_remote());
    }

    #[test]
    fn without_a_recording_span_there_is_no_current_traceparent() {
        assert_eq!(current_traceparent(), None);
    }
}
