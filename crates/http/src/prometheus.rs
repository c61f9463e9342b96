//! `/metrics`: the Prometheus recorder (installed by the application, once per process),
//! the histogram buckets, and the queue gauges refreshed from a cached read.
//!
//! The engine records through the `metrics` facade; without a recorder that costs next to
//! nothing, so a service that embeds delayq chooses its own. The queue counts
//! (`delayq_queue_tasks{queue,state}`; `state="held_back"` counts the tasks waiting for their
//! flow key, one series per queue, never a label per key) need a read of every partition, so
//! a scrape reuses the last read for [`HttpOptions::queue_stats_ttl`](crate::HttpOptions) and
//! concurrent scrapes share one refresh. The read itself is [`Scheduler::stats`]: 16 partitions at once
//! over all queues, and one read at a time per scheduler, shared with the `GET /v1/queues`
//! callers (the dashboard) waiting at the same time.

use std::time::{Duration, Instant};

use axum::http::header;
use axum::response::{IntoResponse, Response};
use delayq_engine::Scheduler;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use parking_lot::Mutex;

use crate::error::{ApiError, HttpError};
use crate::State;

/// Buckets of `delayq_fire_lateness_seconds`: single milliseconds up to 5 ms, then coarser.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of `delayq_handler_duration_seconds`: single milliseconds up to 5 ms, then
/// coarser up to 5 minutes.
pub const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Every metric delayq records (the names of DESIGN.md; histograms add `_bucket`, `_sum`
/// and `_count` series).
pub const METRIC_NAMES: &[&str] = &[
    "delayq_tasks_scheduled_total",
    "delayq_tasks_fired_total",
    "delayq_tasks_completed_total",
    "delayq_fire_lateness_seconds",
    "delayq_handler_duration_seconds",
    "delayq_queue_tasks",
    "delayq_partitions_owned",
    "delayq_cluster_members",
    "delayq_prefetched_tasks",
    "delayq_lease_expired_total",
    "delayq_redis_errors_total",
    "delayq_writes_unconfirmed_total",
    "delayq_handler_resource_failures_total",
    "delayq_recurring_ticks_total",
    "delayq_recurring_schedules",
    "delayq_queue_paused",
];

/// How long one refresh of the queue counts may take before the scrape goes on without it.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(2);

/// A Prometheus builder with delayq's histogram buckets, for an application that installs
/// its own recorder (and adds its own settings).
///
/// # Errors
/// Never with the built-in bucket lists; the type allows for the builder's checks.
pub fn prometheus_builder() -> Result<PrometheusBuilder, HttpError> {
    let builder = PrometheusBuilder::new();
    let builder = builder
        .set_buckets_for_metric(
            Matcher::Full("delayq_fire_lateness_seconds".to_owned()),
            LATENESS_BUCKETS,
        )
        .map_err(|error| HttpError::Buckets {
            metric: "delayq_fire_lateness_seconds",
            reason: error.to_string(),
        })?;
    builder
        .set_buckets_for_metric(
            Matcher::Full("delayq_handler_duration_seconds".to_owned()),
            DURATION_BUCKETS,
        )
        .map_err(|error| HttpError::Buckets {
            metric: "delayq_handler_duration_seconds",
            reason: error.to_string(),
        })
}

/// Installs the Prometheus recorder as this process's global `metrics` recorder and returns
/// its handle for [`HttpOptions::metrics`](crate::HttpOptions). Calling it again returns the
/// same handle.
///
/// # Errors
/// When another recorder is installed already.
pub fn install_prometheus() -> Result<PrometheusHandle, HttpError> {
    static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);
    let mut installed = INSTALLED.lock();
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let recorder = prometheus_builder()?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|error| HttpError::Recorder(error.to_string()))?;
    describe();
    *installed = Some(handle.clone());
    Ok(handle)
}

/// The HELP lines.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "delayq_tasks_scheduled_total",
        "Tasks stored by a schedule (created or replaced)"
    );
    describe_counter!("delayq_tasks_fired_total", "Tasks handed to a handler");
    describe_counter!(
        "delayq_tasks_completed_total",
        "Settled attempts by outcome: ok, retry, dead"
    );
    describe_histogram!(
        "delayq_fire_lateness_seconds",
        Unit::Seconds,
        "Fired minus due, on the cluster clock"
    );
    describe_histogram!(
        "delayq_handler_duration_seconds",
        Unit::Seconds,
        "How long handlers ran"
    );
    describe_gauge!(
        "delayq_queue_tasks",
        "Tasks per queue and state (pending, due_now, inflight, dead, done, held_back: due \
         tasks waiting for their flow key, counted in pending and due_now too)"
    );
    describe_gauge!(
        "delayq_queue_paused",
        "1 while the queue is paused (delayq queue pause), else 0"
    );
    describe_gauge!(
        "delayq_recurring_schedules",
        "Recurring schedules in the shards this node drives"
    );
    describe_counter!(
        "delayq_recurring_ticks_total",
        "Ticks of recurring schedules by outcome (fired, skipped, missed)"
    );
    describe_gauge!(
        "delayq_partitions_owned",
        "Partitions of the queue this node owns"
    );
    describe_gauge!(
        "delayq_cluster_members",
        "Live members of the cluster as this process sees them"
    );
    describe_gauge!(
        "delayq_prefetched_tasks",
        "Entries held in this node's timer"
    );
    describe_counter!(
        "delayq_lease_expired_total",
        "In-flight tasks taken back after their lease ran out"
    );
    describe_counter!("delayq_redis_errors_total", "Failed calls to Redis");
    describe_counter!(
        "delayq_handler_resource_failures_total",
        "Handlers that could not start for lack of the node's resources (open files, processes, \
         memory), by queue; their tasks were put back without spending an attempt"
    );
    describe_counter!(
        "delayq_writes_unconfirmed_total",
        "Firing-path writes (acks) applied on the Redis master but not confirmed by \
         redis.wait_replicas replicas within redis.wait_timeout, by operation; counted done, \
         a failover could lose them"
    );
}

/// When the queue gauges were last refreshed (the lock also makes concurrent scrapes share
/// one refresh).
#[derive(Default)]
pub(crate) struct QueueGauges {
    refreshed: tokio::sync::Mutex<Option<Instant>>,
}

impl QueueGauges {
    /// Sets `delayq_queue_tasks` and `delayq_queue_paused`, reading the store only when
    /// the last read is older than `ttl`.
    async fn refresh(&self, scheduler: &Scheduler, ttl: Duration) {
        let mut refreshed = self.refreshed.lock().await;
        if refreshed.is_some_and(|at| at.elapsed() < ttl) {
            return;
        }
        // A failed read is not retried before the TTL either: a scrape must not hammer a
        // Redis that is down.
        *refreshed = Some(Instant::now());
        match tokio::time::timeout(REFRESH_TIMEOUT, scheduler.stats()).await {
            Ok(Ok(stats)) => {
                let paused = tokio::time::timeout(REFRESH_TIMEOUT, scheduler.paused_queues())
                    .await
                    .ok()
                    .and_then(Result::ok);
                if let Some(paused) = &paused {
                    for queue in stats.keys() {
                        let value = if paused.contains(queue) { 1.0 } else { 0.0 };
                        metrics::gauge!("delayq_queue_paused", "queue" => queue.clone()).set(value);
                    }
                }
                for (queue, counts) in stats {
                    for (state, value) in [
                        ("pending", counts.pending),
                        ("due_now", counts.due_now),
                        ("inflight", counts.inflight),
                        ("dead", counts.dead),
                        ("done", counts.done),
                        // One series per queue, never per key: keys are unbounded.
                        ("held_back", counts.held_back),
                    ] {
                        metrics::gauge!("delayq_queue_tasks", "queue" => queue.clone(), "state" => state)
                            .set(value as f64);
                    }
                }
            }
            Ok(Err(error)) => {
                metrics::counter!("delayq_redis_errors_total").increment(1);
                tracing::warn!(%error, "queue counts for /metrics not refreshed");
            }
            Err(_) => {
                metrics::counter!("delayq_redis_errors_total").increment(1);
                tracing::warn!(
                    "queue counts for /metrics not refreshed: Redis did not answer in time"
                );
            }
        }
    }
}

/// `GET /metrics`: the Prometheus text format; 404 when the application gave no handle.
#[utoipa::path(get, path = "/metrics", tag = "cluster", operation_id = "prometheus_metrics",
    responses(
        (status = 200, description = "The Prometheus text format", body = String, content_type = "text/plain; version=0.0.4"),
        crate::openapi::NotFound))]
pub(crate) async fn render(state: State) -> Response {
    let Some(handle) = state.options.metrics.clone() else {
        return ApiError::not_found(
            "metrics are not enabled here (no Prometheus recorder was given to the router)",
        )
        .into_response();
    };
    state
        .gauges
        .refresh(&state.scheduler, state.options.queue_stats_ttl)
        .await;
    // Set last, just before the text is rendered: the store reads above take time, and a
    // process that serves several routers (tests) shares one recorder.
    metrics::gauge!("delayq_cluster_members")
        .set(state.scheduler.membership().members.len() as f64);
    handle.run_upkeep();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// `GET /v1/lateness`: per queue, the firing lateness this process recorded
/// (`{"<queue>":{"count","p50_ms","p99_ms"}}`, each quantile the upper bound of its
/// histogram bucket). Empty when this process fires nothing or has no recorder.
#[utoipa::path(get, path = "/lateness", tag = "cluster", operation_id = "fire_lateness",
    responses((status = 200, description = "{\"<queue>\":{\"count\",\"p50_ms\",\"p99_ms\"}} fired by this process", body = Object)))]
pub(crate) async fn lateness(state: State) -> axum::Json<serde_json::Value> {
    let text = state
        .options
        .metrics
        .as_ref()
        .map(PrometheusHandle::render)
        .unwrap_or_default();
    axum::Json(lateness_from_text(&text))
}

/// Reads the `delayq_fire_lateness_seconds` buckets out of the Prometheus text.
fn lateness_from_text(text: &str) -> serde_json::Value {
    use std::collections::BTreeMap;
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("delayq_fire_lateness_seconds_bucket{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let (Some(queue), Some(le), Ok(value)) = (
            label(labels, "queue"),
            label(labels, "le"),
            value.trim().parse::<f64>(),
        ) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        buckets
            .entry(queue.to_owned())
            .or_default()
            .push((le, value));
    }
    let mut out = serde_json::Map::new();
    for (queue, mut cumulative) in buckets {
        cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
        let count = cumulative.last().map_or(0.0, |(_, value)| *value);
        if count <= 0.0 {
            continue;
        }
        let quantile = |q: f64| {
            cumulative
                .iter()
                .find(|(_, value)| *value >= q * count)
                .map(|(le, _)| {
                    if le.is_finite() {
                        le * 1000.0
                    } else {
                        f64::MAX
                    }
                })
                .unwrap_or(f64::MAX)
        };
        out.insert(
            queue,
            serde_json::json!({
                "count": count as u64,
                "p50_ms": quantile(0.5),
                "p99_ms": quantile(0.99),
            }),
        );
    }
    serde_json::Value::Object(out)
}

/// The value of `name="..."` among Prometheus labels.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let end = labels[start..].find('"')? + start;
    Some(&labels[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_histograms_resolve_single_milliseconds() {
        for buckets in [LATENESS_BUCKETS, DURATION_BUCKETS] {
            for ms in 1..=5 {
                let bound = f64::from(ms) / 1000.0;
                assert!(
                    buckets.iter().any(|b| (b - bound).abs() < 1e-12),
                    "no {ms} ms bucket in {buckets:?}"
                );
            }
            assert!(buckets.windows(2).all(|pair| pair[0] < pair[1]));
        }
    }

    #[test]
    fn lateness_quantiles_come_from_the_buckets() {
        let text = "\
delayq_fire_lateness_seconds_bucket{queue=\"q\",le=\"0.001\"} 60
delayq_fire_lateness_seconds_bucket{queue=\"q\",le=\"0.002\"} 98
delayq_fire_lateness_seconds_bucket{queue=\"q\",le=\"0.005\"} 100
delayq_fire_lateness_seconds_bucket{queue=\"q\",le=\"+Inf\"} 100
delayq_fire_lateness_seconds_count{queue=\"q\"} 100
";
        let lateness = lateness_from_text(text);
        assert_eq!(lateness["q"]["count"], 100);
        assert_eq!(lateness["q"]["p50_ms"], 1.0);
        assert_eq!(lateness["q"]["p99_ms"], 5.0);
    }
}
