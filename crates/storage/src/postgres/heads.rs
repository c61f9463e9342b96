//! The earliest pending due of many partitions, read in one statement: what the light looks
//! of idle partitions ([`TaskStore::pending_head`](crate::TaskStore::pending_head)) answer
//! from.
//!
//! # Why
//! An idle partition's owner looks at it every `idle_pull_period` (30–45 s by default), a
//! light look that reads only its earliest pending due. On Redis that is one cheap command;
//! on PostgreSQL one statement is one transaction, and 50 queues × 16 partitions would cost
//! ~20 transactions per second doing nothing. So the store keeps a *view*: the heads of every
//! partition asked about lately, read together (one index probe each) when a light look finds
//! the view older than [`HEAD_VIEW_MAX_AGE`] or without its partition. An idle node then
//! costs about one statement per `HEAD_VIEW_MAX_AGE`, whatever its partition count.
//!
//! # What a stale answer costs
//! The engine uses a light look only to plan the next look; new tasks reach an idle
//! partition's owner by wake-up, and a full look (every tenth idle look, and at once when a
//! light look finds something within the window) reads the partition itself. A view up to
//! `HEAD_VIEW_MAX_AGE` old can delay the backstop look behind a lost wake-up by that much.
//! Writes made through this store (schedules, full looks) drop their partition from the
//! view, so this node's own changes are never answered stale.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{from_db, from_layer};
use crate::error::StorageResult;
use crate::model::Partition;

/// How old the view of partition heads may be when a light look answers from it.
pub const HEAD_VIEW_MAX_AGE: Duration = Duration::from_secs(5);

/// A partition not asked about for this long leaves the view (it was handed to another
/// node, or it is busy and looked at in full).
const ASKED_TTL: Duration = Duration::from_secs(300);

/// The view and the partitions it covers.
#[derive(Debug, Default)]
pub(super) struct HeadView {
    state: Mutex<ViewState>,
    /// Held while the view is read again, so that concurrent light looks share one read.
    refresh: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct ViewState {
    /// When the view was read (taken before the statement ran), if ever.
    taken: Option<Instant>,
    /// Each covered partition's earliest pending due (`None`: nothing pending).
    heads: HashMap<Partition, Option<u64>>,
    /// When each partition was last asked about.
    asked: HashMap<Partition, Instant>,
    /// Whether a read of the view is under way, and the partitions written meanwhile: its
    /// answer for them may predate the write, so it is not kept.
    reading: bool,
    written_while_reading: std::collections::HashSet<Partition>,
}

impl ViewState {
    /// The answer for `partition` if the view has a fresh one.
    fn fresh(&self, partition: &Partition, now: Instant) -> Option<Option<u64>> {
        let taken = self.taken?;
        if now.saturating_duration_since(taken) >= HEAD_VIEW_MAX_AGE {
            return None;
        }
        self.heads.get(partition).copied()
    }
}

impl HeadView {
    /// Drops `partition` from the view: it was just written through this store.
    pub(super) fn forget(&self, partition: &Partition) {
        let mut state = self.state.lock();
        if !state.heads.is_empty() {
            state.heads.remove(partition);
        }
        if state.reading {
            state.written_while_reading.insert(partition.clone());
        }
    }

    /// The earliest pending due of `partition`, from the view or, when it has no fresh
    /// answer, from a new read of every partition asked about lately.
    pub(super) async fn head(
        &self,
        store: &super::PostgresStore,
        partition: &Partition,
    ) -> StorageResult<Option<u64>> {
        let now = Instant::now();
        {
            let mut state = self.state.lock();
            state.asked.insert(partition.clone(), now);
            if let Some(head) = state.fresh(partition, now) {
                return Ok(head);
            }
        }
        let _reading = self.refresh.lock().await;
        let taken = Instant::now();
        let covered: Vec<Partition> = {
            let mut state = self.state.lock();
            // Another light look may have read the view while this one waited.
            if let Some(head) = state.fresh(partition, taken) {
                return Ok(head);
            }
            state
                .asked
                .retain(|_, asked| taken.saturating_duration_since(*asked) < ASKED_TTL);
            state.reading = true;
            state.asked.keys().cloned().collect()
        };
        let read = read_heads(store, &covered).await;
        let mut state = self.state.lock();
        state.reading = false;
        let written = std::mem::take(&mut state.written_while_reading);
        let mut heads = read?;
        let answer = heads.get(partition).copied().flatten();
        for partition in &written {
            heads.remove(partition);
        }
        state.heads = heads;
        state.taken = Some(taken);
        Ok(answer)
    }
}

/// The earliest pending due of each of `partitions`, in one statement.
async fn read_heads(
    store: &super::PostgresStore,
    partitions: &[Partition],
) -> StorageResult<HashMap<Partition, Option<u64>>> {
    let queues: Vec<String> = partitions
        .iter()
        .map(|partition| partition.queue.as_str().to_owned())
        .collect();
    let indexes: Vec<i32> = partitions
        .iter()
        .map(|partition| i32::try_from(partition.index).unwrap_or(i32::MAX))
        .collect();
    let sql = store.sql();
    let rows = store
        .inner
        .database
        .run("pending_heads", move |client| {
            let sql = sql.clone();
            let (queues, indexes) = (queues.clone(), indexes.clone());
            Box::pin(async move {
                let statement = client.prepare_cached(&sql.pending_heads).await?;
                client.query(&statement, &[&queues, &indexes]).await
            })
        })
        .await
        .map_err(|error| from_layer("pending_heads", error))?;
    let mut heads: HashMap<Partition, Option<u64>> = partitions
        .iter()
        .map(|partition| (partition.clone(), None))
        .collect();
    for row in rows {
        let ordinal = usize::try_from(row.get::<_, i64>(0)).unwrap_or(0);
        let due: Option<i64> = row.get(1);
        if let Some(partition) = ordinal.checked_sub(1).and_then(|at| partitions.get(at)) {
            heads.insert(partition.clone(), due.map(from_db));
        }
    }
    Ok(heads)
}
