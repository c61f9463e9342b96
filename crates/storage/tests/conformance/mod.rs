//! The conformance suite of [`TaskStore`]: written once, run against every backend.
//!
//! A backend's test file defines a factory `fn(StoreOptions) -> SubjectFuture` that builds a
//! fresh, empty store (with its own server, if it needs one) and invokes
//! [`conformance_suite!`] with it; the macro stamps out one `#[tokio::test]` per case, grouped
//! in modules (`schedule::replace_reports_the_previous_due`, ...). Every case is a `pub async
//! fn(Make)` in one of the group modules below: a case left out of the macro's list is an
//! unused function, which the lints reject. A backend whose server is slow to start (the
//! 3-master cluster) takes the same list as values (`conformance_suite!(cases)`) and runs the
//! cases inside one test that owns the server.
//!
//! Times: due times, `now` and lease deadlines are the caller's, so cases use fixed times
//! around [`T0`]. The only times a backend takes itself (completion and failure stamps, the
//! dedup age) are real: Redis reads its own `TIME`, so no case fakes that clock.

pub mod claim;
pub mod controls;
pub mod dead;
pub mod dedup;
pub mod flow;
pub mod input;
pub mod lease;
pub mod look;
pub mod queues;
pub mod queues_delete;
pub mod races;
pub mod recurring;
pub mod schedule;
pub mod traces;

use std::any::Any;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_storage::{
    AckOutcome, ClaimedTask, FailAction, FailOutcome, NewTask, Partition, PartitionStats,
    QueueName, ScheduleMode, ScheduleOutcome, StoreOptions, TaskId, TaskInfo, TaskStore,
};

/// A fixed point in time (2023-11-14) around which cases place their due times.
pub const T0: u64 = 1_700_000_000_000;

/// The lease deadline cases give claims: far enough after [`T0`] that nothing expires unless
/// a case asks for it.
pub const LEASE: u64 = T0 + 60_000;

/// A store under test, and whatever must live as long as it (a private server).
pub struct Subject {
    store: Arc<dyn TaskStore>,
    queue: String,
    _guard: Option<Box<dyn Any + Send>>,
}

impl Subject {
    /// Wraps a fresh store; `guard` is dropped after the store. [`setup`] registers the queue
    /// `conformance`.
    pub fn new(store: Arc<dyn TaskStore>, guard: Option<Box<dyn Any + Send>>) -> Self {
        Subject {
            store,
            queue: "conformance".to_owned(),
            _guard: guard,
        }
    }

    /// The same subject, with [`setup`] registering `queue` (which must start with
    /// `conformance`) instead: on a cluster, cases sharing the server then spread their
    /// partitions over its masters.
    #[allow(dead_code)] // only the cluster's file needs it
    pub fn on_queue(mut self, queue: String) -> Self {
        assert!(queue.starts_with("conformance"), "{queue}");
        self.queue = queue;
        self
    }

    /// A shared handle, for tasks spawned by concurrent cases.
    pub fn shared(&self) -> Arc<dyn TaskStore> {
        Arc::clone(&self.store)
    }
}

impl Deref for Subject {
    type Target = dyn TaskStore;

    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

/// What a factory returns.
pub type SubjectFuture = Pin<Box<dyn Future<Output = Subject> + Send>>;

/// A backend's factory: a fresh, empty store with these options.
pub type Make = fn(StoreOptions) -> SubjectFuture;

/// A fresh store with default options, one registered queue of one partition, and that
/// partition (every id routes to it).
pub async fn setup(make: Make) -> (Subject, Partition) {
    setup_with(make, StoreOptions::default()).await
}

/// Like [`setup`], with options.
pub async fn setup_with(make: Make, options: StoreOptions) -> (Subject, Partition) {
    let store = make(options).await;
    let queue = store.queue.clone();
    let partition = register(&store, &queue, 1).await;
    (store, partition)
}

/// Registers `name` with `partitions` partitions and returns its partition 0.
pub async fn register(store: &Subject, name: &str, partitions: u32) -> Partition {
    let queue = QueueName::new(name).expect("valid queue name");
    let recorded = store
        .register_queue(&queue, partitions)
        .await
        .expect("register_queue");
    assert_eq!(recorded, partitions);
    Partition::new(queue, 0)
}

/// A valid task id.
pub fn id(name: &str) -> TaskId {
    TaskId::new(name).expect("valid task id")
}

/// A task with a payload naming it.
pub fn task(name: &str, due_ms: u64) -> NewTask {
    NewTask {
        id: id(name),
        due_ms,
        payload: format!("payload of {name}").into(),
        traceparent: None,
    }
}

/// Schedules with upsert and returns the outcome.
pub async fn schedule(
    store: &Subject,
    partition: &Partition,
    name: &str,
    due_ms: u64,
) -> ScheduleOutcome {
    store
        .schedule(partition, task(name, due_ms), ScheduleMode::Upsert)
        .await
        .expect("schedule")
}

/// Stores `items` with one `schedule_many` (upsert) and checks each one was created.
pub async fn create_all(store: &Subject, items: Vec<(Partition, NewTask)>) {
    let count = items.len();
    let results = store
        .schedule_many(items, ScheduleMode::Upsert)
        .await
        .expect("schedule_many");
    assert_eq!(results.len(), count);
    for (index, result) in results.iter().enumerate() {
        assert!(
            matches!(result, Ok(ScheduleOutcome::Created)),
            "item {index}: {result:?}"
        );
    }
}

/// Claims every task due at `now_ms` with [`LEASE`].
pub async fn claim_all(store: &Subject, partition: &Partition, now_ms: u64) -> Vec<ClaimedTask> {
    store
        .claim_due(partition, now_ms, 10_000, LEASE, "conformance")
        .await
        .expect("claim_due")
        .tasks
}

/// Claims exactly one task due at `now_ms`, with [`LEASE`].
pub async fn claim_one(store: &Subject, partition: &Partition, now_ms: u64) -> ClaimedTask {
    let mut tasks = claim_all(store, partition, now_ms).await;
    assert_eq!(tasks.len(), 1, "expected one claimed task: {tasks:?}");
    tasks.remove(0)
}

/// Claims the one task due at `now_ms`, with a lease until `lease_deadline_ms`.
pub async fn claim_one_until(
    store: &Subject,
    partition: &Partition,
    now_ms: u64,
    lease_deadline_ms: u64,
) -> ClaimedTask {
    let batch = store
        .claim_due(partition, now_ms, 1, lease_deadline_ms, "conformance")
        .await
        .expect("claim_due");
    let mut tasks = batch.tasks;
    assert_eq!(tasks.len(), 1, "expected one claimed task: {tasks:?}");
    tasks.remove(0)
}

/// Schedules `name` at [`T0`], claims it with a lease until `T0 + 1s`, and lets
/// `requeue_expired` take it back at `T0 + 2s`: the claim returned holds a stale token and
/// the task is pending again, due at once.
pub async fn lose_lease(store: &Subject, partition: &Partition, name: &str) -> ClaimedTask {
    schedule(store, partition, name, T0).await;
    let lost = claim_one_until(store, partition, T0, T0 + 1_000).await;
    let requeued = store
        .requeue_expired(partition, T0 + 2_000, 10)
        .await
        .expect("requeue_expired");
    assert_eq!(requeued, [id(name)]);
    lost
}

/// Acks a claimed task and returns the outcome.
pub async fn ack(store: &Subject, claimed: &ClaimedTask) -> AckOutcome {
    store.ack(&claimed.token).await.expect("ack")
}

/// Fails a claimed task with a retry at `retry_ms`.
pub async fn retry_at(
    store: &Subject,
    claimed: &ClaimedTask,
    error: &str,
    retry_ms: u64,
) -> FailOutcome {
    store
        .fail(&claimed.token, error, FailAction::RetryAt(retry_ms))
        .await
        .expect("fail")
}

/// Puts a claimed task back at `due_ms` without spending its attempt
/// ([`FailAction::RequeueAt`]).
pub async fn requeue_at(
    store: &Subject,
    claimed: &ClaimedTask,
    error: &str,
    due_ms: u64,
) -> FailOutcome {
    store
        .fail(&claimed.token, error, FailAction::RequeueAt(due_ms))
        .await
        .expect("fail")
}

/// Fails a claimed task into the dead letters.
pub async fn dead_letter(store: &Subject, claimed: &ClaimedTask, error: &str) -> FailOutcome {
    store
        .fail(&claimed.token, error, FailAction::DeadLetter)
        .await
        .expect("fail")
}

/// Schedules `name` at `due_ms`, claims it and acks it.
pub async fn complete(store: &Subject, partition: &Partition, name: &str, due_ms: u64) {
    schedule(store, partition, name, due_ms).await;
    let claimed = claim_one(store, partition, due_ms).await;
    assert_eq!(ack(store, &claimed).await, AckOutcome::Completed);
}

/// Schedules `name` at `due_ms`, claims it and dead-letters it with `error`.
pub async fn schedule_dead(
    store: &Subject,
    partition: &Partition,
    name: &str,
    due_ms: u64,
    error: &str,
) {
    schedule(store, partition, name, due_ms).await;
    let claimed = claim_one(store, partition, due_ms).await;
    assert_eq!(
        dead_letter(store, &claimed, error).await,
        FailOutcome::DeadLettered
    );
}

/// The task, which must exist.
pub async fn get(store: &Subject, partition: &Partition, name: &str) -> TaskInfo {
    store
        .get(partition, &id(name))
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("task {name} not found"))
}

/// The ids of claimed tasks, as strings.
pub fn ids(tasks: &[ClaimedTask]) -> Vec<&str> {
    tasks.iter().map(|task| task.id.as_str()).collect()
}

/// Polls `condition` every 20 ms until it holds or `within` runs out.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stamps out the suite for one backend: `conformance_suite!(factory);` where `factory` is a
/// [`Make`] in scope, one `#[tokio::test]` per case.
///
/// `conformance_suite!(cases)` is instead an expression: every case as `(name, run)`, where
/// `run` is a `fn(Make) -> Pin<Box<dyn Future<Output = ()>>>`, for a backend whose server is
/// slow to start and is shared by the cases inside one test (the cluster's file).
#[macro_export]
macro_rules! conformance_suite {
    (cases) => {
        $crate::conformance_suite!(@list @cases)
    };
    ($make:ident) => {
        $crate::conformance_suite!(@list @groups $make);
    };
    (@list @$then:ident $($make:ident)?) => {
        $crate::conformance_suite! {@$then $($make)?;
            schedule: [
                schedule_creates_a_pending_task_visible_in_get,
                schedule_in_the_past_is_claimable_at_once,
                schedule_again_replaces_and_reports_the_previous_due,
                replace_bumps_the_generation_and_resets_attempt_and_error,
                replace_moves_the_task_to_its_new_due,
                if_absent_creates_when_no_task_exists,
                if_absent_keeps_a_pending_task_and_reports_its_due,
                if_absent_keeps_an_inflight_task,
                if_absent_keeps_a_dead_task,
                upsert_replaces_a_dead_task_with_a_pending_one,
                cancel_removes_a_pending_task,
                cancel_of_an_unknown_id_returns_false,
                get_of_an_unknown_id_returns_none,
                schedule_many_stores_every_item_and_reports_in_order,
                schedule_many_honours_if_absent,
                schedule_many_fails_invalid_items_alone,
                schedule_many_spreads_over_partitions,
                every_mode_against_a_pending_task_with_an_earlier_and_a_later_due,
                earlier_and_later_keep_a_pending_task_on_a_tie,
                earlier_and_later_compare_with_the_retry_due_of_a_task_waiting_for_a_retry,
                every_mode_creates_when_no_live_task_exists,
                earlier_keeps_an_inflight_task_whatever_the_due,
                later_rearms_an_inflight_task_only_for_a_later_due,
                earlier_and_later_replace_a_dead_task,
                every_mode_dedups_the_same_due_after_ack,
                every_mode_dedups_a_resend_while_inflight,
                schedule_many_honours_earlier_and_later,
            ],
            claim: [
                claim_due_returns_due_tasks_oldest_first_with_payloads,
                claim_due_respects_the_limit_and_reports_the_next_due,
                claim_due_never_takes_future_tasks,
                claim_due_on_an_empty_partition_returns_nothing,
                claimed_task_is_inflight_until_its_lease_deadline,
                claimed_tasks_carry_attempt_one_and_distinct_fencing_tokens,
                peek_window_returns_pairs_within_inclusive_bounds_in_due_order,
                peek_window_respects_the_limit_and_claims_nothing,
                peek_window_skips_inflight_tasks,
                partitions_are_independent,
                claim_due_returns_at_most_max_claim_bytes_but_at_least_one_task,
                max_claim_bytes_counts_payload_bytes_only,
                recover_claim_returns_the_tasks_of_a_lost_reply_with_their_tokens,
                recover_claim_of_another_claim_is_empty,
            ],
            look: [
                look_reports_the_window_and_the_next_due_after_it,
                look_with_a_full_window_reports_no_next_due,
                look_at_an_empty_partition_reports_nothing,
                look_requeues_expired_leases_and_reports_the_earliest_lease_left,
                look_prunes_completed_records_only_when_asked,
                pending_head_is_the_earliest_pending_due_after_each_write,
            ],
            lease: [
                ack_completes_and_keeps_a_done_record_without_payload,
                ack_with_a_token_from_before_requeue_and_reclaim_is_stale_and_changes_nothing,
                ack_after_requeue_without_reclaim_is_stale,
                fail_with_a_stale_token_is_rejected_and_changes_nothing,
                renew_with_a_stale_token_is_rejected,
                renew_extends_the_lease_past_requeue_expired,
                requeue_expired_puts_lapsed_leases_back_without_spending_an_attempt,
                requeue_expired_respects_the_limit_and_leaves_live_leases,
                requeue_expired_drops_a_superseded_lease_and_keeps_the_new_schedule,
                fail_retry_at_increments_the_attempt_and_keeps_the_last_error,
                fail_retry_at_is_claimable_at_the_new_time_only,
                fail_requeue_at_keeps_the_attempt_the_error_and_the_dedup_key,
                fail_keeps_at_most_4096_bytes_of_the_error_text,
                cancel_of_an_inflight_task_answers_inflight_and_lets_it_finish,
                cancel_of_a_task_waiting_for_a_retry_is_cancelled,
                cancel_after_claim_makes_ack_superseded,
                cancel_after_claim_makes_fail_superseded,
                reschedule_during_inflight_makes_ack_superseded_and_the_new_schedule_stands,
                reschedule_during_inflight_makes_fail_superseded,
                ack_after_cancel_and_schedule_again_is_superseded_and_keeps_the_new_task,
            ],
            dead: [
                fail_dead_letter_moves_the_task_to_dead_with_its_last_error,
                list_dead_is_oldest_first_and_respects_the_limit,
                peek_dead_lists_ids_and_failure_times_oldest_first_within_the_limit,
                retry_dead_makes_it_pending_at_the_due_with_attempt_one,
                retry_dead_of_a_task_that_is_not_dead_returns_false,
                purge_dead_of_one_id_deletes_only_that_dead_letter,
                purge_dead_of_all_deletes_every_dead_letter_of_the_partition,
                cancel_removes_a_dead_task,
            ],
            dedup: [
                same_id_and_due_after_ack_is_duplicate_and_never_claimable,
                a_mixed_schedule_many_batch_answers_as_single_schedules,
                if_absent_with_the_same_due_after_ack_is_duplicate,
                different_due_after_ack_rearms_the_id,
                after_prune_done_the_same_due_is_no_longer_duplicate,
                prune_done_only_forgets_tasks_completed_before_the_cutoff,
                prune_done_respects_the_limit,
                a_prune_that_found_nothing_does_not_hide_a_record_older_than_the_next_cutoff,
                dedup_ends_after_the_executed_retention,
                requeued_task_dedups_on_the_due_it_was_scheduled_with,
                retried_task_dedups_on_the_due_it_was_scheduled_with,
                rearming_an_id_forgets_its_done_record,
                with_zero_retention_ack_keeps_no_done_record,
                same_id_and_due_while_inflight_is_duplicate_and_changes_nothing,
                same_id_and_due_while_a_retry_runs_is_duplicate,
                another_due_while_inflight_replaces_and_fires_at_the_new_due,
                with_zero_retention_a_resend_while_inflight_replaces,
                same_id_and_due_while_waiting_for_a_retry_is_duplicate_and_changes_nothing,
                same_id_and_due_while_an_immediate_retry_waits_is_duplicate,
                same_id_and_due_once_dead_is_duplicate_and_the_dead_letter_stays,
                with_zero_retention_a_resend_while_waiting_for_a_retry_replaces,
            ],
            queues: [
                register_queue_records_the_count_and_accepts_it_again,
                register_queue_with_another_count_is_a_partition_mismatch,
                register_queue_rejects_zero_and_more_than_65536_partitions,
                queues_lists_registered_queues_sorted_by_name,
                stats_count_pending_due_now_inflight_dead_and_done,
                stats_of_an_untouched_partition_are_zero,
            ],
            races: [
                concurrent_claimers_never_share_a_task,
                cancel_racing_claim_never_both_cancels_and_completes,
                ack_racing_requeue_expired_is_all_or_nothing,
                concurrent_upserts_of_one_id_leave_exactly_one_pending_task,
            ],
            controls: [
                a_paused_queue_claims_nothing_and_keeps_accepting_schedules,
                pause_and_resume_are_idempotent_and_per_queue,
                rate_tokens_of_a_window_never_add_up_to_more_than_the_limit,
                global_slots_are_bounded_across_holders_and_come_back_when_released,
                global_slots_of_a_holder_whose_lease_ran_out_come_back,
            ],
            queues_delete: [
                delete_queue_removes_every_task_and_the_registry_entry,
                a_deleted_queue_starts_afresh,
            ],
            recurring: [
                swap_creates_only_when_absent_and_replaces_only_the_expected_record,
                due_returns_active_schedules_by_next_tick_and_the_earliest_after_them,
                swap_without_a_next_tick_takes_the_schedule_out_of_the_due_set,
                delete_removes_the_schedule_and_what_was_learnt_of_its_fires,
                fired_is_learnt_only_for_an_existing_schedule_and_only_forward,
                list_spans_every_shard_sorted_by_name,
                create_tick_is_a_no_op_once_in_the_ledger_even_with_no_retention,
                create_tick_keeps_a_live_task_of_the_same_id,
                create_tick_checks_the_payload_before_writing,
                concurrent_tick_creations_create_it_once,
                concurrent_swaps_from_one_record_let_exactly_one_win,
                due_many_answers_each_shard_as_its_own_look_would,
            ],
            traces: [
                a_traceparent_comes_back_with_each_claim_of_its_task,
                many_traced_and_untraced_schedules_keep_their_own,
                a_new_schedule_replaces_or_drops_the_traceparent,
                a_finished_task_leaves_no_traceparent_behind,
                recover_claim_returns_the_traceparents,
                get_shows_the_traceparent_scheduled_with_and_none_without,
            ],
            input: [
                queue_name_empty_is_rejected,
                queue_name_of_65_chars_is_rejected,
                queue_name_with_a_brace_is_rejected,
                queue_name_with_a_colon_is_rejected,
                queue_name_with_a_space_is_rejected,
                queue_name_not_ascii_is_rejected,
                task_id_empty_is_rejected,
                task_id_over_512_bytes_is_rejected,
                task_id_with_a_nul_byte_is_rejected,
                payload_over_max_payload_is_rejected_and_nothing_is_stored,
                payload_over_max_payload_leaves_the_existing_task_alone,
                payload_of_exactly_max_payload_is_accepted,
                due_beyond_year_9999_is_rejected_and_nothing_is_stored,
                payload_too_large_and_due_beyond_9999_is_payload_too_large,
            ],
        }
    };
    (@cases; $($group:ident: [$($case:ident),* $(,)?]),* $(,)?) => {
        vec![
            $($(
                (
                    concat!(stringify!($group), "::", stringify!($case)),
                    (|make| Box::pin($crate::conformance::$group::$case(make)))
                        as fn(
                            $crate::conformance::Make,
                        ) -> ::std::pin::Pin<Box<dyn ::std::future::Future<Output = ()>>>,
                ),
            )*)*
        ]
    };
    (@groups $make:ident; $($group:ident: [$($case:ident),* $(,)?]),* $(,)?) => {
        $(
            mod $group {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $case() {
                        $crate::conformance::$group::$case(super::$make).await;
                    }
                )*
            }
        )*
    };
}
