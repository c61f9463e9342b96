//! [`TaskStore`] for [`RedisStore`]: each method delegates to the module that does the work
//! (`schedule`, `lease`, `admin`).

use async_trait::async_trait;

use crate::error::StorageResult;
use crate::flow::{FlowLimits, HeldKey, QueueLayout};
use crate::model::{
    AckOutcome, Cancel, ClaimBatch, DeadTask, FailAction, FailOutcome, LeaseToken, LookReport,
    LookRequest, NewTask, Partition, PartitionStats, QueueName, ScheduleMode, ScheduleOutcome,
    TaskId, TaskInfo,
};
use crate::store::{ItemResult, TaskStore};

use super::connection::RedisStore;

#[async_trait]
impl TaskStore for RedisStore {
    async fn register_layout(
        &self,
        queue: &QueueName,
        partitions: u32,
        flow_keys: Option<bool>,
    ) -> StorageResult<QueueLayout> {
        self.register(queue, partitions, flow_keys).await
    }

    async fn queue_layouts(&self) -> StorageResult<Vec<(QueueName, QueueLayout)>> {
        self.registered_queues().await
    }

    async fn set_flow_limits(&self, queue: &QueueName, limits: FlowLimits) -> StorageResult<()> {
        self.keep_flow_limits(queue, limits).await
    }

    async fn held_keys(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<HeldKey>> {
        self.read_held_keys(partition, limit).await
    }

    async fn schedule(
        &self,
        partition: &Partition,
        task: NewTask,
        mode: ScheduleMode,
    ) -> StorageResult<ScheduleOutcome> {
        self.schedule_one(partition, task, mode).await
    }

    async fn schedule_many(
        &self,
        items: Vec<(Partition, NewTask)>,
        mode: ScheduleMode,
    ) -> StorageResult<Vec<ItemResult>> {
        self.schedule_batch(items, mode).await
    }

    async fn cancel(&self, partition: &Partition, id: &TaskId) -> StorageResult<Cancel> {
        self.remove(partition, id).await
    }

    async fn get(&self, partition: &Partition, id: &TaskId) -> StorageResult<Option<TaskInfo>> {
        self.lookup(partition, id).await
    }

    async fn claim_due(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
        lease_deadline_ms: u64,
        owner: &str,
    ) -> StorageResult<ClaimBatch> {
        self.claim(partition, now_ms, limit, lease_deadline_ms, owner)
            .await
    }

    async fn recover_claim(
        &self,
        partition: &Partition,
        owner: &str,
        lease_deadline_ms: u64,
    ) -> StorageResult<ClaimBatch> {
        self.recover(partition, owner, lease_deadline_ms).await
    }

    async fn peek_window(
        &self,
        partition: &Partition,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        self.peek(partition, from_ms, to_ms, limit).await
    }

    async fn look(
        &self,
        partition: &Partition,
        request: &LookRequest,
    ) -> StorageResult<LookReport> {
        self.look_at(partition, request).await
    }

    async fn ack(&self, token: &LeaseToken) -> StorageResult<AckOutcome> {
        self.complete(token).await
    }

    async fn fail(
        &self,
        token: &LeaseToken,
        error: &str,
        action: FailAction,
    ) -> StorageResult<FailOutcome> {
        self.record_failure(token, error, action).await
    }

    async fn renew(&self, token: &LeaseToken, lease_deadline_ms: u64) -> StorageResult<()> {
        self.extend_lease(token, lease_deadline_ms).await
    }

    async fn requeue_expired(
        &self,
        partition: &Partition,
        now_ms: u64,
        limit: usize,
    ) -> StorageResult<Vec<TaskId>> {
        self.requeue(partition, now_ms, limit).await
    }

    async fn prune_done(
        &self,
        partition: &Partition,
        older_than_ms: u64,
        limit: usize,
    ) -> StorageResult<u64> {
        self.prune(partition, older_than_ms, limit).await
    }

    async fn stats(&self, partition: &Partition, now_ms: u64) -> StorageResult<PartitionStats> {
        self.count(partition, now_ms).await
    }

    async fn list_dead(&self, partition: &Partition, limit: usize) -> StorageResult<Vec<DeadTask>> {
        self.dead_letters(partition, limit).await
    }

    async fn peek_dead(
        &self,
        partition: &Partition,
        limit: usize,
    ) -> StorageResult<Vec<(TaskId, u64)>> {
        self.dead_ids(partition, limit).await
    }

    async fn retry_dead(
        &self,
        partition: &Partition,
        id: &TaskId,
        due_ms: u64,
    ) -> StorageResult<bool> {
        self.revive(partition, id, due_ms).await
    }

    async fn purge_dead(&self, partition: &Partition, id: Option<&TaskId>) -> StorageResult<u64> {
        self.purge(partition, id).await
    }

    async fn set_paused(
        &self,
        queue: &QueueName,
        partitions: u32,
        paused: bool,
    ) -> StorageResult<()> {
        self.pause(queue, partitions, paused).await
    }

    async fn paused_queues(&self) -> StorageResult<Vec<(QueueName, u64)>> {
        self.paused().await
    }

    async fn take_rate_tokens(
        &self,
        queue: &QueueName,
        window_start_ms: u64,
        period_ms: u64,
        limit: u64,
        wanted: u64,
    ) -> StorageResult<u64> {
        self.rate_tokens(queue, window_start_ms, period_ms, limit, wanted)
            .await
    }

    async fn acquire_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        limit: u64,
        wanted: u64,
        lease_ms: u64,
    ) -> StorageResult<u64> {
        self.global_slots(queue, node, Some((limit, wanted, lease_ms)), 0)
            .await
    }

    async fn release_global_slots(
        &self,
        queue: &QueueName,
        node: &str,
        count: u64,
    ) -> StorageResult<()> {
        self.global_slots(queue, node, None, count)
            .await
            .map(|_| ())
    }

    async fn delete_queue(&self, queue: &QueueName, partitions: u32) -> StorageResult<u64> {
        self.drop_queue(queue, partitions).await
    }
}
