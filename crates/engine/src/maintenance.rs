//! Lease takeover and executed-set pruning over the partitions this node owns.
//!
//! Apart from the partition workers on purpose: a worker can wait a long time for handler
//! slots on a saturated queue, and the in-flight tasks of a dead node must come back anyway.

use std::collections::HashSet;
use std::sync::Arc;

use delayq_storage::Partition;
use futures::StreamExt;

use crate::runtime::Runtime;

/// How many expired leases one round puts back per partition.
const REQUEUE_LIMIT: usize = 1_000;
/// How many completed records one prune forgets.
const PRUNE_LIMIT: usize = 1_000;
/// Prune every partition's executed-set every this many rounds (and a partition whose last
/// prune hit the limit on every round, until it catches up).
const PRUNE_EVERY: u64 = 10;
/// Partitions maintained at once.
const CONCURRENCY: usize = 8;

/// Every `pull_period`: requeue expired leases of owned partitions, prune their done sets.
pub(crate) async fn run_maintenance(runtime: Arc<Runtime>) {
    let mut rounds = tokio::time::interval(runtime.config.engine.pull_period);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut backlog: HashSet<Partition> = HashSet::new();
    let mut round: u64 = 0;
    loop {
        tokio::select! {
            biased;
            _ = runtime.stop.cancelled() => return,
            _ = rounds.tick() => {}
        }
        round += 1;
        crate::admin::record_node_gauges(&runtime);
        let owned: Vec<Partition> = runtime.workers.lock().keys().cloned().collect();
        let prune_all = round % PRUNE_EVERY == 0;
        let runtime_ref = &runtime;
        let backlog_ref = &backlog;
        let still_behind: Vec<Partition> = futures::stream::iter(owned)
            .map(|partition| async move {
                let prune = prune_all || backlog_ref.contains(&partition);
                maintain(runtime_ref, partition, prune).await
            })
            .buffer_unordered(CONCURRENCY)
            .filter_map(|behind| async move { behind })
            .collect()
            .await;
        backlog = still_behind.into_iter().collect();
    }
}

/// Maintains one partition; returns it when its prune hit the limit (more to prune).
async fn maintain(runtime: &Arc<Runtime>, partition: Partition, prune: bool) -> Option<Partition> {
    let now = runtime.clock.now_ms();
    match runtime
        .store
        .requeue_expired(&partition, now, REQUEUE_LIMIT)
        .await
    {
        Ok(requeued) if !requeued.is_empty() => {
            metrics::counter!("delayq_lease_expired_total", "queue" => partition.queue.as_str().to_owned())
                .increment(requeued.len() as u64);
            runtime.health.ok();
            tracing::info!(%partition, count = requeued.len(), "took back tasks whose lease expired");
            runtime.timer.insert(now, partition.clone());
        }
        Ok(_) => runtime.health.ok(),
        Err(error) => runtime.health.failed("requeue_expired", &error),
    }
    if !prune {
        return None;
    }
    let retention = runtime.config.engine.executed_retention.as_millis() as u64;
    match runtime
        .store
        .prune_done(&partition, now.saturating_sub(retention), PRUNE_LIMIT)
        .await
    {
        Ok(pruned) if pruned as usize >= PRUNE_LIMIT => Some(partition),
        Ok(_) => None,
        Err(error) => {
            runtime.health.failed("prune_done", &error);
            None
        }
    }
}
