//! `deploy/grafana-dashboard.json` is valid JSON whose queries use only metrics delayq
//! records, and it shows every one of them.

use std::collections::BTreeSet;

use serde_json::Value;

fn exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query", Value::String(text)) => out.push(text.clone()),
                    _ => exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| exprs(item, out)),
        _ => {}
    }
}

#[test]
fn the_grafana_dashboard_queries_exactly_the_recorded_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana-dashboard.json"
    );
    let text = std::fs::read_to_string(path).expect("deploy/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&text).expect("valid JSON");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(!queries.is_empty(), "no queries found");
    let mut used = BTreeSet::new();
    for query in &queries {
        let mut rest = query.as_str();
        while let Some(start) = rest.find("delayq_") {
            let name: String = rest[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[start + name.len()..];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| delayq_http::METRIC_NAMES.contains(base))
                .map_or(name.clone(), str::to_owned);
            assert!(
                delayq_http::METRIC_NAMES.contains(&base.as_str()),
                "{name} in {query:?} is not a metric delayq records"
            );
            used.insert(base);
        }
    }
    let all: BTreeSet<String> = delayq_http::METRIC_NAMES
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(
        used,
        all,
        "metrics without a panel: {:?}",
        all.difference(&used)
    );
}

#[test]
fn the_metric_names_are_those_of_the_design() {
    assert_eq!(
        delayq_http::METRIC_NAMES,
        [
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
        ]
    );
}
