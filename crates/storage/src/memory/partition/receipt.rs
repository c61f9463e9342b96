//! Claim receipts: what `recover_claim` needs to hand out again the tasks of a claim whose
//! reply was lost (the twin of the Redis backend's `<partition>:claim` key).

use super::{PartitionState, Place};
use crate::model::{ClaimBatch, ClaimedTask, LeaseToken, Partition, TaskId};

/// The arguments of one `claim_due`.
#[derive(Debug, Clone, Copy)]
pub(in crate::memory) struct ClaimRequest<'a> {
    pub now_ms: u64,
    pub limit: usize,
    pub lease_deadline_ms: u64,
    pub owner: &'a str,
    pub max_bytes: usize,
    /// The queue's per-key limits, when it has flow keys and any limit is set.
    pub flow: Option<crate::flow::FlowLimits>,
}

/// The latest claim of a partition: who made it, with which lease deadline, and the claim
/// number each task got.
#[derive(Debug)]
pub(super) struct Receipt {
    owner: String,
    lease_deadline_ms: u64,
    claims: Vec<(TaskId, u64)>,
}

impl Receipt {
    pub(super) fn of(request: &ClaimRequest<'_>, tasks: &[ClaimedTask]) -> Self {
        Receipt {
            owner: request.owner.to_owned(),
            lease_deadline_ms: request.lease_deadline_ms,
            claims: tasks
                .iter()
                .map(|task| (task.id.clone(), task.token.claim))
                .collect(),
        }
    }
}

impl PartitionState {
    /// The tasks of the latest claim, if `owner` made it with `lease_deadline_ms`, that are
    /// still in flight under that claim (not cancelled meanwhile).
    pub(in crate::memory) fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> ClaimBatch {
        let mut batch = ClaimBatch::default();
        let Some(receipt) = self
            .receipt
            .as_ref()
            .filter(|r| r.owner == owner && r.lease_deadline_ms == lease_deadline_ms)
        else {
            return batch;
        };
        for (id, claimed) in &receipt.claims {
            let Some(record) = self.tasks.get(id) else {
                continue;
            };
            let held = matches!(record.place, Place::Inflight { claim, .. } if claim == *claimed);
            if !held || record.generation == 0 {
                continue;
            }
            batch.tasks.push(ClaimedTask {
                token: LeaseToken {
                    partition: partition.clone(),
                    id: id.clone(),
                    generation: record.generation,
                    claim: *claimed,
                },
                id: id.clone(),
                due_ms: record.due_ms,
                attempt: record.attempt,
                generation: record.generation,
                payload: record.payload.clone(),
                traceparent: record.traceparent.clone(),
            });
        }
        batch
    }
}
