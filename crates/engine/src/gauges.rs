//! The node gauges, refreshed every `pull_period`.
//!
//! Lease takeover and executed-set pruning used to run here, a store call per owned
//! partition per period; they are part of each partition's look now
//! ([`crate::partition`]), so an idle partition costs one call per idle period.

use std::sync::Arc;

use crate::runtime::Runtime;

/// Every `pull_period`: the members seen, the prefetched entries and the partitions owned.
pub(crate) async fn run_node_gauges(runtime: Arc<Runtime>) {
    let mut rounds = tokio::time::interval(runtime.config.engine.pull_period);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = runtime.stop.cancelled() => return,
            _ = rounds.tick() => crate::admin::record_node_gauges(&runtime),
        }
    }
}
