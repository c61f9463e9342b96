//! The recurring-schedule methods of [`Scheduler`]: upsert, get, list, pause, resume, delete.
//!
//! Each one reads the schedule's record, computes the new one, and swaps it in with a
//! compare-and-set on the text it read; when another writer (a replica upserting during a
//! deploy, the node driving the shard) came first, it reads again and recomputes. So a spec
//! and the tick state derived from it are always written together, and a `next_ms` is never
//! set at or before a tick already created.

use delayq_storage::{Cancel, Partition, QueueName, TaskId, TaskState};

use super::calendar::Calendar;
use super::record::{RecurringSchedule, RecurringSet, ScheduleRecord, UpsertResult};
use super::spec::{RecurringSpec, ScheduleName, SpecError};
use crate::error::{EngineError, EngineResult};
use crate::scheduler::Scheduler;

/// How many times a write is recomputed after losing a compare-and-set before giving up.
const SWAP_ATTEMPTS: usize = 50;

/// The id of the task of `name`'s tick at `tick_ms`: `<name>@<tick_ms>`.
pub fn tick_id(name: &str, tick_ms: u64) -> String {
    format!("{name}@{tick_ms}")
}

/// The schedule name and tick of a task id of the form `<name>@<tick_ms>`.
pub(crate) fn parse_tick_id(id: &str) -> Option<(&str, u64)> {
    let (name, tick) = id.rsplit_once('@')?;
    if tick.is_empty() || !tick.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    ScheduleName::new(name).ok()?;
    Some((name, tick.parse().ok()?))
}

/// The first tick of `spec` strictly after `after_ms`, within `[start_at, end_at)`.
pub(crate) fn first_tick_after(
    spec: &RecurringSpec,
    calendar: &Calendar,
    anchor_ms: u64,
    after_ms: u64,
) -> Option<u64> {
    let after = match spec.start_at_ms {
        Some(start) => after_ms.max(start.saturating_sub(1)),
        None => after_ms,
    };
    let tick = calendar.next_after(after, anchor_ms)?;
    match spec.end_at_ms {
        Some(end) if tick >= end => None,
        _ => Some(tick),
    }
}

fn corrupt(name: &str, reason: impl std::fmt::Display) -> EngineError {
    EngineError::CorruptSchedule {
        name: name.to_owned(),
        reason: reason.to_string(),
    }
}

fn contended(name: &str) -> EngineError {
    EngineError::ScheduleContended {
        name: name.to_owned(),
        attempts: SWAP_ATTEMPTS,
    }
}

impl Scheduler {
    /// Creates or updates the recurring schedule `name` (upsert), idempotently: the same spec
    /// again answers [`UpsertResult::Unchanged`] and moves nothing, so every replica may
    /// declare the same schedules at start. A changed spec answers
    /// [`UpsertResult::Updated`]: its next tick is the new spec's first tick after now (and
    /// after every tick already created), and counts, pause and the `every` anchor stay.
    ///
    /// ```no_run
    /// use delayq_engine::recurring::RawSpec;
    /// # async fn run(scheduler: delayq_engine::Scheduler) -> Result<(), Box<dyn std::error::Error>> {
    /// let spec = RawSpec {
    ///     queue: Some("reports".into()),
    ///     cron: Some("0 9 * * *".into()),
    ///     tz: Some("Europe/Berlin".into()),
    ///     ..RawSpec::default()
    /// }
    /// .validate()?;
    /// let set = scheduler.set_recurring("nightly-report", spec).await?;
    /// println!("{} next at {:?}", set.result.as_str(), set.next_ms);
    /// # Ok(()) }
    /// ```
    pub async fn set_recurring(
        &self,
        name: &str,
        spec: RecurringSpec,
    ) -> EngineResult<RecurringSet> {
        let name = ScheduleName::new(name)?;
        let name = name.as_str();
        let calendar = spec.calendar()?;
        self.partitions_for_write(&spec.queue).await?;
        let canonical = spec.to_canonical_json();
        let store = &self.runtime.store;
        for _ in 0..SWAP_ATTEMPTS {
            let now = self.now_ms();
            let current = store.recurring_get(name).await?;
            let (expected, record, result) = match &current {
                None => {
                    let anchor = spec.start_at_ms.unwrap_or(now);
                    let mut record = ScheduleRecord::new(&spec, anchor, now);
                    record.next_ms = first_tick_after(&spec, &calendar, anchor, now);
                    (None, record, UpsertResult::Created)
                }
                Some(stored) => {
                    let old = ScheduleRecord::decode(&stored.record);
                    if let Ok(old) = &old {
                        if old.spec == canonical {
                            return Ok(RecurringSet {
                                name: name.to_owned(),
                                queue: spec.queue.as_str().to_owned(),
                                next_ms: old.next_ms,
                                result: UpsertResult::Unchanged,
                            });
                        }
                    }
                    // A record that does not decode is replaced by the new spec.
                    let mut record = old.unwrap_or_else(|error| {
                        tracing::warn!(schedule = name, %error, "replacing an unreadable schedule record");
                        ScheduleRecord::new(&spec, now, now)
                    });
                    record.spec = canonical.clone();
                    record.anchor_ms = spec.start_at_ms.unwrap_or(record.anchor_ms);
                    record.updated_ms = now;
                    let after = now.max(record.last_tick_ms.unwrap_or(0));
                    record.next_ms = match record.paused_ms {
                        Some(_) => None,
                        None => first_tick_after(&spec, &calendar, record.anchor_ms, after),
                    };
                    (Some(stored.record.as_str()), record, UpsertResult::Updated)
                }
            };
            if store
                .recurring_swap(name, expected, Some(&record.encode()), record.next_ms)
                .await?
            {
                tracing::info!(schedule = name, result = result.as_str(), next_ms = ?record.next_ms, "recurring schedule set");
                self.runtime.recurring_changed.notify_one();
                return Ok(RecurringSet {
                    name: name.to_owned(),
                    queue: spec.queue.as_str().to_owned(),
                    next_ms: record.next_ms,
                    result,
                });
            }
        }
        Err(contended(name))
    }

    /// Upserts every schedule of the configuration's `recurring:` section (what every node
    /// does at start, and `delayq serve`); one answer per schedule, by name.
    pub async fn declare_configured_recurring(&self) -> EngineResult<Vec<RecurringSet>> {
        let declared = self.runtime.config.recurring.clone();
        let mut answers = Vec::with_capacity(declared.len());
        for (name, spec) in declared {
            answers.push(self.set_recurring(&name, spec).await?);
        }
        Ok(answers)
    }

    /// The recurring schedule `name`, if it exists.
    pub async fn recurring(&self, name: &str) -> EngineResult<Option<RecurringSchedule>> {
        let name = ScheduleName::new(name)?;
        let Some(stored) = self.runtime.store.recurring_get(name.as_str()).await? else {
            return Ok(None);
        };
        let record =
            ScheduleRecord::decode(&stored.record).map_err(|e| corrupt(&stored.name, e))?;
        let schedule = RecurringSchedule::from_record(&stored.name, &record, stored.last_fired)
            .map_err(|error| corrupt(&stored.name, error))?;
        Ok(Some(schedule))
    }

    /// Every recurring schedule, sorted by name (an unreadable record is logged and left out).
    pub async fn list_recurring(&self) -> EngineResult<Vec<RecurringSchedule>> {
        let stored = self.runtime.store.recurring_list().await?;
        let mut schedules = Vec::with_capacity(stored.len());
        for stored in stored {
            let view = ScheduleRecord::decode(&stored.record)
                .map_err(|error| SpecError::new("record", &stored.name, error))
                .and_then(|record| {
                    RecurringSchedule::from_record(&stored.name, &record, stored.last_fired)
                });
            match view {
                Ok(schedule) => schedules.push(schedule),
                Err(error) => {
                    tracing::warn!(schedule = %stored.name, %error, "skipping an unreadable schedule")
                }
            }
        }
        Ok(schedules)
    }

    /// Pauses `name`: it creates no ticks until resumed, and its tick created ahead of time
    /// that is not due yet is cancelled. `None` when it does not exist.
    pub async fn pause_recurring(&self, name: &str) -> EngineResult<Option<RecurringSchedule>> {
        self.change_recurring(name, |record, _, _, now| {
            if record.paused_ms.is_none() {
                record.paused_ms = Some(now);
                record.next_ms = None;
                record.updated_ms = now;
            }
        })
        .await
    }

    /// Resumes `name` with its first tick after now; the ticks of the pause are counted as
    /// skipped, not missed. `None` when it does not exist.
    pub async fn resume_recurring(&self, name: &str) -> EngineResult<Option<RecurringSchedule>> {
        self.change_recurring(name, |record, spec, calendar, now| {
            let Some(paused_ms) = record.paused_ms else {
                return;
            };
            let after = paused_ms.max(record.last_tick_ms.unwrap_or(0));
            let (skipped, _) = calendar.ticks_in(after, now, record.anchor_ms, 0);
            record.skipped += skipped;
            record.paused_ms = None;
            record.updated_ms = now;
            let after = now.max(record.last_tick_ms.unwrap_or(0));
            record.next_ms = first_tick_after(spec, calendar, record.anchor_ms, after);
        })
        .await
    }

    /// Deletes `name` for good and cancels its pending tick (a tick already running
    /// finishes). Whether it existed.
    pub async fn delete_recurring(&self, name: &str) -> EngineResult<bool> {
        let name = ScheduleName::new(name)?;
        let name = name.as_str();
        let store = &self.runtime.store;
        for _ in 0..SWAP_ATTEMPTS {
            let Some(stored) = store.recurring_get(name).await? else {
                return Ok(false);
            };
            if !store
                .recurring_swap(name, Some(&stored.record), None, None)
                .await?
            {
                continue;
            }
            if let Ok(record) = ScheduleRecord::decode(&stored.record) {
                if let Ok(spec) = record.spec() {
                    let mut ticks = record.unforgotten.clone();
                    ticks.extend(record.last_tick_ms);
                    ticks.sort_unstable();
                    ticks.dedup();
                    self.cancel_pending_ticks(&spec.queue, name, &ticks, 0)
                        .await;
                    self.forget_ticks(&spec.queue, name, &ticks).await;
                }
            }
            tracing::info!(schedule = name, "recurring schedule deleted");
            return Ok(true);
        }
        Err(contended(name))
    }

    /// Applies `change` to the record of `name` by compare-and-set; the pending tick that is
    /// not due yet is cancelled when the change pauses the schedule.
    async fn change_recurring(
        &self,
        name: &str,
        change: impl Fn(&mut ScheduleRecord, &RecurringSpec, &Calendar, u64),
    ) -> EngineResult<Option<RecurringSchedule>> {
        let name = ScheduleName::new(name)?;
        let name = name.as_str();
        let store = &self.runtime.store;
        for _ in 0..SWAP_ATTEMPTS {
            let Some(stored) = store.recurring_get(name).await? else {
                return Ok(None);
            };
            let mut record =
                ScheduleRecord::decode(&stored.record).map_err(|error| corrupt(name, error))?;
            let spec = record.spec().map_err(|error| corrupt(name, error))?;
            let calendar = spec.calendar().map_err(|error| corrupt(name, error))?;
            let now = self.now_ms();
            let was_paused = record.paused_ms.is_some();
            change(&mut record, &spec, &calendar, now);
            let text = record.encode();
            if text != stored.record
                && !store
                    .recurring_swap(name, Some(&stored.record), Some(&text), record.next_ms)
                    .await?
            {
                continue;
            }
            if !was_paused && record.paused_ms.is_some() {
                let ticks: Vec<u64> = record.last_tick_ms.into_iter().collect();
                self.cancel_pending_ticks(&spec.queue, name, &ticks, now)
                    .await;
            }
            self.runtime.recurring_changed.notify_one();
            let view = RecurringSchedule::from_record(name, &record, stored.last_fired)
                .map_err(|error| corrupt(name, error))?;
            return Ok(Some(view));
        }
        Err(contended(name))
    }

    /// Cancels the ticks of `name` that are still pending and due after `after_ms` (a tick
    /// that runs, or ran, or is a dead letter, is left alone). Best effort: a failure is
    /// logged, and the tick simply fires.
    pub(crate) async fn cancel_pending_ticks(
        &self,
        queue: &QueueName,
        name: &str,
        ticks: &[u64],
        after_ms: u64,
    ) {
        for &tick in ticks.iter().filter(|&&tick| tick > after_ms) {
            let id = tick_id(name, tick);
            let result = async {
                let info = self.get(queue.as_str(), &id).await?;
                if info.is_some_and(|info| info.state == TaskState::Pending) {
                    return self.cancel(queue.as_str(), &id).await.map(Some);
                }
                Ok::<_, EngineError>(None)
            }
            .await;
            match result {
                Ok(Some(Cancel::Cancelled)) => {
                    tracing::debug!(schedule = name, tick, "cancelled a pending tick")
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(schedule = name, tick, %error, "could not cancel a pending tick")
                }
            }
        }
    }

    /// Forgets the ledger entries of `ticks` (best effort: a leftover entry only keeps that
    /// one tick id from ever being created again, which nothing asks for).
    pub(crate) async fn forget_ticks(&self, queue: &QueueName, name: &str, ticks: &[u64]) {
        if ticks.is_empty() {
            return;
        }
        let layout = match self.layout_for_write(queue).await {
            Ok(layout) => layout,
            Err(error) => {
                tracing::debug!(schedule = name, %error, "could not forget ticks");
                return;
            }
        };
        for &tick in ticks {
            let Ok(id) = TaskId::new(tick_id(name, tick)) else {
                continue;
            };
            let partition = Partition::new(queue.clone(), layout.partition_of(&id));
            if let Err(error) = self
                .runtime
                .store
                .forget_ticks(&partition, std::slice::from_ref(&id))
                .await
            {
                tracing::debug!(schedule = name, tick, %error, "could not forget a tick");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_ids_name_the_schedule_and_the_tick() {
        assert_eq!(
            tick_id("nightly", 1_700_000_000_000),
            "nightly@1700000000000"
        );
        assert_eq!(
            parse_tick_id("nightly@1700000000000"),
            Some(("nightly", 1_700_000_000_000))
        );
        assert_eq!(parse_tick_id("user@example.com"), None);
        assert_eq!(parse_tick_id("no-at"), None);
        assert_eq!(parse_tick_id("@123"), None);
        assert_eq!(parse_tick_id("a b@123"), None);
    }
}
