//! The statements of the PostgreSQL coordinator and the rows they answer with.

use delayq_postgres::tokio_postgres::types::ToSql;
use delayq_postgres::tokio_postgres::Row;
use serde::Deserialize;

use crate::api::{Member, NodeId, NodeInfo, QueueFilter};
use crate::error::{CoordinatorError, CoordinatorResult};

/// One heartbeat: `{schema}.heartbeat(...)` (migration 4).
pub(super) const HEARTBEAT: &str = "SELECT epoch, added, stalled, removed, now_us, members::text \
     FROM {schema}.heartbeat($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

/// A graceful leave.
pub(super) const LEAVE: &str = "SELECT epoch, members::text FROM {schema}.leave($1, $2, $3)";

/// The epoch, the database clock, and the members when the caller does not hold the epoch.
pub(super) const SNAPSHOT: &str = "SELECT epoch, now_us, members::text FROM {schema}.snapshot($1)";

/// A wake-up (or an announcement) outside any transaction of the caller's.
pub(super) const WAKE: &str = "SELECT pg_notify($1, $2)";

/// `delayq nodes`.
pub(super) const NODES: &str =
    "SELECT id, name, host, pid, version, started_ms, last_heartbeat_ms, queues \
     FROM {schema}.nodes ORDER BY id";

/// The arguments of [`HEARTBEAT`], in order.
#[derive(Clone, Debug)]
pub(super) struct BeatRequest {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) host: String,
    pub(super) pid: i64,
    pub(super) version: String,
    pub(super) started_ms: i64,
    pub(super) queues: Option<Vec<String>>,
    pub(super) ttl_ms: i64,
    pub(super) floor_epoch: i64,
    pub(super) previous_ms: i64,
    pub(super) stall_gap_ms: i64,
    pub(super) held_epoch: Option<i64>,
    pub(super) max_removed: i32,
    pub(super) channel: String,
}

impl BeatRequest {
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 14] {
        [
            &self.id,
            &self.name,
            &self.host,
            &self.pid,
            &self.version,
            &self.started_ms,
            &self.queues,
            &self.ttl_ms,
            &self.floor_epoch,
            &self.previous_ms,
            &self.stall_gap_ms,
            &self.held_epoch,
            &self.max_removed,
            &self.channel,
        ]
    }
}

/// What a heartbeat answered.
#[derive(Clone, Debug)]
pub(super) struct Beat {
    pub(super) epoch: u64,
    pub(super) added: bool,
    pub(super) stalled: bool,
    pub(super) removed: Vec<String>,
    pub(super) now_us: u64,
    pub(super) members: Option<Vec<Member>>,
}

impl Beat {
    pub(super) fn from_row(row: &Row) -> CoordinatorResult<Beat> {
        Ok(Beat {
            epoch: from_db(row.get(0)),
            added: row.get(1),
            stalled: row.get(2),
            removed: row.get(3),
            now_us: from_db(row.get(4)),
            members: members(row.get(5))?,
        })
    }
}

/// The epoch with the members, when they came along.
#[derive(Clone, Debug)]
pub(super) struct Snapshot {
    pub(super) epoch: u64,
    pub(super) now_us: u64,
    pub(super) members: Option<Vec<Member>>,
}

impl Snapshot {
    pub(super) fn from_row(row: &Row) -> CoordinatorResult<Snapshot> {
        Ok(Snapshot {
            epoch: from_db(row.get(0)),
            now_us: from_db(row.get(1)),
            members: members(row.get(2))?,
        })
    }

    pub(super) fn from_leave_row(row: &Row) -> CoordinatorResult<Snapshot> {
        Ok(Snapshot {
            epoch: from_db(row.get(0)),
            now_us: 0,
            members: members(row.get(1))?,
        })
    }
}

/// A member as `{schema}.members()` writes it.
#[derive(Deserialize)]
struct MemberRow {
    id: String,
    queues: Option<Vec<String>>,
}

/// The members from their JSON array (sorted by id by the query); `None` when not sent.
fn members(json: Option<String>) -> CoordinatorResult<Option<Vec<Member>>> {
    let Some(json) = json else {
        return Ok(None);
    };
    let rows: Vec<MemberRow> =
        serde_json::from_str(&json).map_err(|error| CoordinatorError::CorruptEntry {
            node: "(members)".to_owned(),
            reason: error.to_string(),
        })?;
    let mut members: Vec<Member> = rows
        .into_iter()
        .map(|row| Member {
            id: NodeId::from_string(row.id),
            queues: queues_from_db(row.queues),
        })
        .collect();
    // jsonb_agg keeps the ORDER BY of the query, but Rust's order of strings is the one the
    // assignment relies on (the database's collation may differ).
    members.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Some(members))
}

/// A `nodes` row as the node's info.
pub(super) fn node_info(row: &Row) -> CoordinatorResult<NodeInfo> {
    let id: String = row.get(0);
    let pid: i64 = row.get(3);
    Ok(NodeInfo {
        pid: u32::try_from(pid).map_err(|_| CoordinatorError::CorruptEntry {
            node: id.clone(),
            reason: format!("pid {pid} is not a process id"),
        })?,
        id: NodeId::from_string(&id),
        name: row.get(1),
        host: row.get(2),
        version: row.get(4),
        started_ms: from_db(row.get(5)),
        last_heartbeat_ms: from_db(row.get(6)),
        queues: queues_from_db(row.get(7)),
    })
}

/// The queue filter as stored: NULL for every queue.
pub(super) fn queues_to_db(queues: &QueueFilter) -> Option<Vec<String>> {
    match queues {
        QueueFilter::All => None,
        QueueFilter::Only(queues) => Some(queues.clone()),
    }
}

fn queues_from_db(queues: Option<Vec<String>>) -> QueueFilter {
    match queues {
        None => QueueFilter::All,
        Some(queues) => QueueFilter::only(queues),
    }
}

fn from_db(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
