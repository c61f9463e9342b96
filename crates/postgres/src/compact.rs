//! Giving back the disk a large backlog left behind, online, with the nodes running.
//!
//! Autovacuum gives a table's heap back once its rows are gone, but PostgreSQL never shrinks
//! a B-tree file: after 1,000,000 tasks fired in rounds of 100,000, the indexes of `tasks` and
//! `done` stayed at ~75 MB, almost all of it deleted pages kept for reuse (BENCHMARKS.md,
//! "Table and index size after 1,000,000 tasks on PostgreSQL"). The small `partitions` table
//! has the same trouble with its heap: each claim rewrites its partition's row, and the few
//! row versions that move to another page leave its rows spread over many pages that vacuum
//! cannot cut off.
//!
//! [`Compactor::run`] looks at the schema's indexes and tables in one statement and, only
//! when one is far larger than its rows need, rebuilds it:
//! - an index of at least [`MIN_INDEX_BYTES`] that is more than [`BLOAT_FACTOR`] times what
//!   its table's rows need (at [`INDEX_BYTES_PER_ROW`] each, plus [`SLACK_BYTES`]) is rebuilt
//!   with `REINDEX INDEX CONCURRENTLY`, which neither blocks writes nor reads;
//! - a small table (at most [`SMALL_TABLE_ROWS`] rows, a heap between [`MIN_HEAP_BYTES`] and
//!   [`MAX_REWRITE_BYTES`]) whose heap is more than [`BLOAT_FACTOR`] times its rows' bytes
//!   plus [`SLACK_BYTES`] is
//!   rewritten with `VACUUM FULL`, which locks the table while it copies its few rows (a few
//!   milliseconds), and gives up at once when the lock is not free within
//!   [`REWRITE_LOCK_WAIT`] (a busy table is tried again at the next run);
//! - an invalid index that an interrupted `REINDEX CONCURRENTLY` left behind (`*_ccnew`,
//!   `*_ccold`) is dropped.
//!
//! The work runs on a connection of its own holding a per-schema advisory lock, so two nodes
//! never compact at once; a schema that needs nothing costs the one look.

use std::time::Duration;

use tokio_postgres::Client;
use tracing::Instrument;

use crate::config::Schema;
use crate::error::Result;
use crate::migrations::fnv1a;
use crate::pool::Database;

/// An index smaller than this is never rebuilt, whatever its table holds.
pub const MIN_INDEX_BYTES: u64 = 1024 * 1024;
/// What a table's row is taken to need in each of its indexes (delayq's index entries are
/// 40–90 bytes with their line pointer; pages are ~90 % full): generous, so that an index
/// that is merely full is never rebuilt.
pub const INDEX_BYTES_PER_ROW: u64 = 128;
/// Added to what the rows need: an index or heap of a nearly empty table keeps a few pages.
pub const SLACK_BYTES: u64 = 64 * 1024;
/// How many times its need an index or a small table's heap may grow before it is rebuilt.
pub const BLOAT_FACTOR: u64 = 4;
/// A table of at most this many rows counts as small: its heap may be rewritten.
pub const SMALL_TABLE_ROWS: u64 = 10_000;
/// A heap smaller than this is never rewritten.
pub const MIN_HEAP_BYTES: u64 = 128 * 1024;
/// A heap larger than this is never rewritten (the rewrite locks the table while it reads
/// the whole heap).
pub const MAX_REWRITE_BYTES: u64 = 4 * 1024 * 1024;
/// How long a `VACUUM FULL` waits for its table's lock before it gives up.
pub const REWRITE_LOCK_WAIT: Duration = Duration::from_millis(50);
/// How long a `REINDEX CONCURRENTLY` waits for a lock (it waits for the transactions open
/// when it starts) before it gives up; its leftover invalid index is dropped next time.
pub const REINDEX_LOCK_WAIT: Duration = Duration::from_secs(5);

/// One index or table of the schema as the look saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The index's or table's name (unquoted).
    pub name: String,
    /// An index: its table's name. A table: `None`.
    pub table: Option<String>,
    /// The relation's main fork, in bytes.
    pub bytes: u64,
    /// Its table's rows (the larger of the statistics' live rows and the planner's estimate).
    pub rows: u64,
    /// Whether an index is valid (false while a `CREATE`/`REINDEX CONCURRENTLY` builds it,
    /// or after one failed). Always true for a table.
    pub valid: bool,
}

/// One thing [`Compactor::run`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `REINDEX INDEX CONCURRENTLY` of the index.
    Reindex {
        /// The index.
        index: String,
        /// Its size before, in bytes.
        bytes: u64,
    },
    /// `VACUUM FULL` of the table, when its rows' bytes (measured) show bloat.
    Rewrite {
        /// The table.
        table: String,
        /// Its heap before, in bytes.
        bytes: u64,
    },
    /// `DROP INDEX CONCURRENTLY` of an interrupted rebuild's leftover.
    DropLeftover {
        /// The invalid index.
        index: String,
    },
}

/// What one [`Compactor::run`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Whether another node held the lock (then nothing was done).
    pub busy: bool,
    /// What was done, with the bytes before.
    pub done: Vec<Action>,
    /// What was tried and failed (a lock not free, a missing privilege): `(action, error)`.
    pub failed: Vec<(Action, String)>,
}

/// The actions the look's `relations` call for, before measuring the small tables' rows.
/// An index is rebuilt when it is at least [`MIN_INDEX_BYTES`] and more than
/// [`BLOAT_FACTOR`] × (rows × [`INDEX_BYTES_PER_ROW`] + [`SLACK_BYTES`]); a small table is a
/// candidate for a rewrite ([`Action::Rewrite`], confirmed by [`heap_is_bloated`]).
pub fn plan(relations: &[Relation]) -> Vec<Action> {
    let mut actions = Vec::new();
    for relation in relations {
        match &relation.table {
            Some(_) if !relation.valid => {
                if is_rebuild_leftover(&relation.name) {
                    actions.push(Action::DropLeftover {
                        index: relation.name.clone(),
                    });
                }
            }
            Some(_) => {
                let need = relation
                    .rows
                    .saturating_mul(INDEX_BYTES_PER_ROW)
                    .saturating_add(SLACK_BYTES);
                if relation.bytes >= MIN_INDEX_BYTES
                    && relation.bytes > need.saturating_mul(BLOAT_FACTOR)
                {
                    actions.push(Action::Reindex {
                        index: relation.name.clone(),
                        bytes: relation.bytes,
                    });
                }
            }
            None => {
                if relation.rows <= SMALL_TABLE_ROWS
                    && (MIN_HEAP_BYTES..=MAX_REWRITE_BYTES).contains(&relation.bytes)
                {
                    actions.push(Action::Rewrite {
                        table: relation.name.clone(),
                        bytes: relation.bytes,
                    });
                }
            }
        }
    }
    actions
}

/// Whether a heap of `heap_bytes` holding rows of `row_bytes` in all (their
/// `pg_column_size`) is more than [`BLOAT_FACTOR`] times what they need plus [`SLACK_BYTES`].
/// The factor covers the tuple headers, line pointers and free space a page keeps.
pub fn heap_is_bloated(heap_bytes: u64, row_bytes: u64) -> bool {
    heap_bytes
        > row_bytes
            .saturating_mul(BLOAT_FACTOR)
            .saturating_add(SLACK_BYTES)
}

/// The names `REINDEX CONCURRENTLY` gives its new and old index (`<name>_ccnew`,
/// `<name>_ccnew1`, `<name>_ccold`, ...).
fn is_rebuild_leftover(name: &str) -> bool {
    ["_ccnew", "_ccold"].iter().any(|marker| {
        name.rfind(marker).is_some_and(|at| {
            name[at + marker.len()..]
                .chars()
                .all(|c| c.is_ascii_digit())
        })
    })
}

/// The look: every index and ordinary table of the schema with its size and rows.
const LOOK: &str = "SELECT c.relname::text, t.relname::text, pg_relation_size(c.oid)::int8, \
     GREATEST(COALESCE(s.n_live_tup, 0), t.reltuples::int8, 0)::int8, i.indisvalid \
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
     JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace \
     LEFT JOIN pg_stat_user_tables s ON s.relid = t.oid WHERE n.nspname = $1 \
     UNION ALL \
     SELECT t.relname::text, NULL, pg_relation_size(t.oid)::int8, \
     GREATEST(COALESCE(s.n_live_tup, 0), t.reltuples::int8, 0)::int8, true \
     FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace \
     LEFT JOIN pg_stat_user_tables s ON s.relid = t.oid \
     WHERE n.nspname = $1 AND t.relkind = 'r'";

/// Rebuilds what a large backlog left oversized in one schema (the module's doc).
#[derive(Debug, Clone)]
pub struct Compactor {
    database: Database,
}

impl Compactor {
    /// A compactor of `database`'s schema.
    pub fn new(database: &Database) -> Self {
        Compactor {
            database: database.clone(),
        }
    }

    /// The advisory lock a compaction of this schema holds (`pg_advisory_lock` of it, e.g.
    /// from `psql`, holds compactions back: [`Compactor::run`] then reports
    /// [`CompactReport::busy`]).
    pub fn lock_key(&self) -> i64 {
        lock_key(self.database.schema())
    }

    /// The schema's indexes and tables, in one statement on a pooled connection.
    pub async fn look(&self) -> Result<Vec<Relation>> {
        let schema = self.database.schema().name().to_owned();
        self.database
            .run("compact look", move |client| {
                let schema = schema.clone();
                Box::pin(async move {
                    let rows = client.query(LOOK, &[&schema]).await?;
                    Ok(rows.iter().map(relation_of).collect())
                })
            })
            .await
    }

    /// Looks, and when [`plan`] finds work, does it under the schema's compaction lock on a
    /// connection of its own. Each action's failure is reported and the others go on.
    pub async fn run(&self) -> Result<CompactReport> {
        if plan(&self.look().await?).is_empty() {
            return Ok(CompactReport::default());
        }
        let schema = self.database.schema().clone();
        let span = tracing::info_span!("compact", schema = schema.name());
        async {
            let (client, connection) = self.database.connect_dedicated("compact").await?;
            // The lock is the session's: it goes with the connection if anything fails.
            let driver = tokio::spawn(async move {
                let _ = connection.await;
            });
            let result = self.run_locked(&client, &schema).await;
            drop(client);
            let _ = driver.await;
            result
        }
        .instrument(span)
        .await
    }

    async fn run_locked(&self, client: &Client, schema: &Schema) -> Result<CompactReport> {
        let fail = |error: tokio_postgres::Error| self.database.error("compact", &error);
        let locked: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&lock_key(schema)])
            .await
            .map_err(fail)?
            .get(0);
        if !locked {
            return Ok(CompactReport {
                busy: true,
                ..CompactReport::default()
            });
        }
        client
            .batch_execute("SET statement_timeout = 0")
            .await
            .map_err(fail)?;
        // Looked at again under the lock: another node may have compacted meanwhile.
        let relations = client
            .query(LOOK, &[&schema.name()])
            .await
            .map_err(fail)?
            .iter()
            .map(relation_of)
            .collect::<Vec<_>>();
        let mut report = CompactReport::default();
        for action in plan(&relations) {
            match self.apply(client, schema, &action).await {
                Ok(true) => {
                    tracing::info!(?action, "compacted");
                    report.done.push(action);
                }
                Ok(false) => {}
                Err(error) => {
                    let error = self.database.error("compact", &error);
                    tracing::warn!(?action, %error, "could not compact");
                    report.failed.push((action, error.to_string()));
                }
            }
        }
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&lock_key(schema)])
            .await
            .map_err(fail)?;
        Ok(report)
    }

    /// Does `action`; false when a closer look found nothing to do (a small table whose rows
    /// fill its heap).
    async fn apply(
        &self,
        client: &Client,
        schema: &Schema,
        action: &Action,
    ) -> std::result::Result<bool, tokio_postgres::Error> {
        let quoted = |name: &str| format!("{}.{}", schema.quoted(), crate::quote_ident(name));
        match action {
            Action::Reindex { index, .. } => {
                // Apart: statements sent together run in one transaction, which these
                // refuse.
                set_lock_timeout(client, REINDEX_LOCK_WAIT).await?;
                client
                    .batch_execute(&format!("REINDEX INDEX CONCURRENTLY {}", quoted(index)))
                    .await?;
            }
            Action::Rewrite { table, bytes } => {
                let row_bytes: i64 = client
                    .query_one(
                        &format!(
                            "SELECT COALESCE(sum(pg_column_size(r.*)), 0)::int8 FROM {} r",
                            quoted(table)
                        ),
                        &[],
                    )
                    .await?
                    .get(0);
                if !heap_is_bloated(*bytes, row_bytes.max(0) as u64) {
                    return Ok(false);
                }
                // Apart: statements sent together run in one transaction, which these
                // refuse.
                set_lock_timeout(client, REWRITE_LOCK_WAIT).await?;
                client
                    .batch_execute(&format!("VACUUM (FULL) {}", quoted(table)))
                    .await?;
            }
            Action::DropLeftover { index } => {
                // Apart: statements sent together run in one transaction, which these
                // refuse.
                set_lock_timeout(client, REINDEX_LOCK_WAIT).await?;
                client
                    .batch_execute(&format!(
                        "DROP INDEX CONCURRENTLY IF EXISTS {}",
                        quoted(index)
                    ))
                    .await?;
            }
        }
        Ok(true)
    }
}

async fn set_lock_timeout(
    client: &Client,
    wait: Duration,
) -> std::result::Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!("SET lock_timeout = '{}ms'", wait.as_millis()))
        .await
}

fn relation_of(row: &tokio_postgres::Row) -> Relation {
    let bytes: i64 = row.get(2);
    let rows: i64 = row.get(3);
    Relation {
        name: row.get(0),
        table: row.get(1),
        bytes: bytes.max(0) as u64,
        rows: rows.max(0) as u64,
        valid: row.get(4),
    }
}

/// The key of the compaction lock of `schema` (not the migration lock: a compaction never
/// holds a migration back).
fn lock_key(schema: &Schema) -> i64 {
    fnv1a(format!("delayq.compact.{}", schema.name()).as_bytes()) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str, bytes: u64, rows: u64) -> Relation {
        Relation {
            name: name.to_owned(),
            table: Some("tasks".to_owned()),
            bytes,
            rows,
            valid: true,
        }
    }

    fn table(name: &str, bytes: u64, rows: u64) -> Relation {
        Relation {
            name: name.to_owned(),
            table: None,
            bytes,
            rows,
            valid: true,
        }
    }

    const MB: u64 = 1024 * 1024;

    #[test]
    fn an_oversized_index_of_an_emptied_table_is_rebuilt() {
        let actions = plan(&[index("tasks_pending_due", 21 * MB, 0)]);
        assert_eq!(
            actions,
            [Action::Reindex {
                index: "tasks_pending_due".to_owned(),
                bytes: 21 * MB
            }]
        );
    }

    #[test]
    fn an_index_its_rows_fill_is_left_alone() {
        // 100,000 pending tasks in a 22 MB index: ~230 bytes a row, within 4 x 128.
        assert!(plan(&[index("tasks_pending_due", 22 * MB, 100_000)]).is_empty());
        // Small indexes are never rebuilt, even empty.
        assert!(plan(&[index("tasks_pkey", MB - 1, 0)]).is_empty());
    }

    #[test]
    fn the_bound_is_four_times_the_rows_need() {
        let rows = 10_000;
        let need = rows * INDEX_BYTES_PER_ROW + SLACK_BYTES;
        assert!(plan(&[index("i", need * BLOAT_FACTOR, rows)]).is_empty());
        assert_eq!(plan(&[index("i", need * BLOAT_FACTOR + 1, rows)]).len(), 1);
    }

    #[test]
    fn only_small_tables_with_a_sizable_heap_are_rewrite_candidates() {
        assert_eq!(
            plan(&[table("partitions", 832 * 1024, 64)]),
            [Action::Rewrite {
                table: "partitions".to_owned(),
                bytes: 832 * 1024
            }]
        );
        assert!(plan(&[table("partitions", MIN_HEAP_BYTES - 1, 64)]).is_empty());
        assert!(plan(&[table("tasks", 2 * MB, 50_000)]).is_empty());
        assert!(plan(&[table("tasks", 40 * MB, 10)]).is_empty());
    }

    #[test]
    fn a_heap_is_bloated_beyond_four_times_its_rows() {
        // The measured cases: 64 rows of ~300 bytes in 832 kB, and in 304 kB (88 % free,
        // which kept a pruned schema at 2.23x its empty size).
        assert!(heap_is_bloated(832 * 1024, 64 * 300));
        assert!(heap_is_bloated(304 * 1024, 64 * 300));
        assert!(!heap_is_bloated(128 * 1024, 64 * 300));
        assert!(!heap_is_bloated(3 * MB, 800 * 1024));
    }

    #[test]
    fn an_interrupted_rebuilds_leftover_is_dropped_and_no_other_invalid_index() {
        let mut leftover = index("tasks_pending_due_ccnew", 8192, 0);
        leftover.valid = false;
        let mut numbered = index("done_pkey_ccold2", 8192, 0);
        numbered.valid = false;
        let mut building = index("tasks_by_owner", 8192, 0);
        building.valid = false;
        let actions = plan(&[leftover, numbered, building]);
        assert_eq!(
            actions,
            [
                Action::DropLeftover {
                    index: "tasks_pending_due_ccnew".to_owned()
                },
                Action::DropLeftover {
                    index: "done_pkey_ccold2".to_owned()
                }
            ]
        );
        assert!(!is_rebuild_leftover("tasks_ccnewer"));
    }
}
