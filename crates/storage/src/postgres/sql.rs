//! Every statement of the PostgreSQL backend, in one place, with the schema put in once.
//!
//! Parameters: `$1` is always the queue and `$2` the partition index where a statement
//! concerns one partition. Times are milliseconds since the epoch (`bigint`).

use delayq_postgres::Schema;

/// The database clock in milliseconds (the cluster clock).
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::int8";

/// The statements, with the schema substituted.
#[derive(Debug)]
pub(crate) struct Sql {
    /// Creates the partition's row if missing. `$1 queue, $2 idx`.
    pub ensure_partition: String,
    /// Locks the partition's row: `sequence, now_ms, now_us, the queue's registered
    /// partition count, whether the queue is paused`. `$1, $2`.
    pub lock_partition: String,
    /// Stores the sequence. `$1, $2, $3 sequence`.
    pub store_sequence: String,
    /// The registered partition count of `$1`.
    pub queue_partitions: String,

    /// One live task. `$1, $2, $3 id` → state, at_ms, due_ms, scheduled_due_ms, attempt,
    /// generation, claim, payload, last_error, traceparent.
    pub select_task: String,
    /// Which of the ids `$3` have a task row or a done record.
    pub present_ids: String,
    /// Inserts or replaces a pending task. `$1, $2, $3 id, $4 due, $5 generation, $6 payload,
    /// $7 traceparent`.
    pub put_pending: String,
    /// Deletes a live task. `$1, $2, $3 id`.
    pub delete_task: String,
    /// Marks a task cancelled while in flight (its trace goes, as in cancel.lua). `$1, $2, $3 id`.
    pub cancel_inflight: String,
    /// Makes a task pending again. `$1, $2, $3 id, $4 at_ms, $5 due_ms, $6 attempt, $7 last_error`.
    pub make_pending: String,
    /// Makes a task dead. `$1, $2, $3 id, $4 failed_ms, $5 last_error`.
    pub make_dead: String,
    /// Moves a lease deadline. `$1, $2, $3 id, $4 lease`.
    pub renew: String,
    /// Makes a dead task pending at `$4` with attempt 1. `$1, $2, $3 id, $4 due`.
    pub retry_dead: String,

    /// The superseded claim of an id: claim, lease_deadline_ms. `$1, $2, $3 id`.
    pub select_superseded: String,
    /// Records a superseded claim. `$1, $2, $3 id, $4 claim, $5 lease`.
    pub put_superseded: String,
    /// Forgets a superseded claim. `$1, $2, $3 id`.
    pub delete_superseded: String,

    /// The done record of an id: due_ms, scheduled_due_ms, attempt, generation, completed_ms.
    pub select_done: String,
    /// Records a completion. `$1, $2, $3 id, $4 due, $5 scheduled due, $6 attempt,
    /// $7 generation, $8 completed_ms`.
    pub put_done: String,
    /// Forgets a done record. `$1, $2, $3 id`.
    pub delete_done: String,
    /// Forgets up to `$4` done records completed before `$3`: the count.
    pub prune_done: String,

    /// Up to `$4` due pending tasks at or before `$3`, oldest first, locked: id, due_ms,
    /// attempt, generation, payload, traceparent.
    pub due_tasks: String,
    /// Moves claimed tasks in flight, forgets their superseded claims, keeps the claim's
    /// receipt and the partition's sequence, and returns the earliest pending time left: one
    /// statement. `$1, $2, $3 ids, $4 claims, $5 lease, $6 owner, $7 sequence`.
    pub mark_claimed: String,
    /// A whole claim in one statement, committed on its own: locks the partition's row,
    /// takes up to `$4` due pending tasks (at or before `$3` and the database clock) as long
    /// as their payloads stay within `$5` bytes (at least one), moves them in flight with
    /// lease `$6` and fresh claim numbers, forgets their superseded claims, and keeps the
    /// receipt (owner `$7`) and the sequence. Returns one row per task (or one with no task):
    /// registered partitions, paused, the earliest pending due left, then the task's id,
    /// due_ms, attempt, generation, payload, traceparent, claim. No row: the partition's row
    /// does not exist yet.
    pub claim_at_once: String,
    /// The receipt: owner, lease, ids, claims.
    pub select_receipt: String,
    /// The earliest pending time.
    pub next_due: String,
    /// The earliest pending time after `$3`.
    pub next_due_after: String,
    /// The earliest pending time of each partition `($1[i], $2[i])`: `(i, min)` rows, `i`
    /// from 1, one index probe each.
    pub pending_heads: String,
    /// Pending `(id, at_ms)` with `$3 <= at_ms <= $4`, up to `$5`, in order.
    pub window: String,
    /// The earliest lease deadline in flight (tasks and superseded claims).
    pub earliest_lease: String,
    /// Up to `$4` leases (tasks and superseded claims) that ran out before `$3`, in
    /// (deadline, id) order: id, deadline, superseded.
    pub expired_leases: String,
    /// A full look that finds nothing to change, in one read without the partition's lock
    /// (`look.rs`). `$3 now_ms, $4 window end, $5 window limit` → one row per window entry
    /// (or one with none): the queue's registered partitions, whether the partition's row
    /// exists, whether a lease ran out before `least($3, database clock)`, the earliest
    /// pending time after `$4`, the earliest lease deadline, then the entry's id and at_ms.
    pub look_at_once: String,

    /// Counts: pending, due_now (at or before `$3`), inflight, dead, done.
    pub stats: String,
    /// Up to `$3` dead letters oldest first: id, due_ms, attempt, failed_ms, last_error,
    /// payload.
    pub list_dead: String,
    /// Up to `$3` `(id, failed_ms)` of dead letters oldest first.
    pub peek_dead: String,
    /// The ids of every dead letter of the partition.
    pub dead_ids: String,

    /// Completes the held leases among the tokens `$3 ids, $4 generations, $5 claims` in one
    /// statement: deletes each task a token holds and records it done at `$6`; returns the
    /// `(id, generation, claim)` completed. `$1, $2`.
    pub ack_held: String,
    /// As `ack_held` without done records (retention 0): also forgets older ones.
    pub ack_held_unrecorded: String,
    /// `ack_held` as one statement committed on its own: it locks the partition's row first
    /// and stamps the done records with the database clock (no `$6`).
    pub ack_held_at_once: String,
    /// `ack_held_unrecorded` as one statement committed on its own.
    pub ack_held_unrecorded_at_once: String,

    /// Whether the tick ledger has `$3`.
    pub tick_exists: String,
    /// Adds `$3` (due `$4`) to the tick ledger.
    pub put_tick: String,
    /// Removes the ids `$3` from the tick ledger.
    pub forget_ticks: String,
}

/// See [`Sql::ack_held`].
const ACK_HELD: &str = "WITH acked AS (DELETE FROM {schema}.tasks t \
     USING unnest($3::text[], $4::int8[], $5::int8[]) AS k(id, generation, claim) \
     WHERE t.queue = $1 AND t.idx = $2 AND t.id = k.id AND t.id = ANY($3) AND t.state = 'inflight' \
     AND t.generation = k.generation AND t.claim = k.claim \
     RETURNING t.id, t.due_ms, t.scheduled_due_ms, t.attempt, t.generation, t.claim), \
     recorded AS (INSERT INTO {schema}.done (queue, idx, id, due_ms, scheduled_due_ms, \
     attempt, generation, completed_ms) SELECT $1, $2, id, due_ms, scheduled_due_ms, \
     attempt, generation, $6 FROM acked ON CONFLICT (queue, idx, id) DO UPDATE SET \
     due_ms = EXCLUDED.due_ms, scheduled_due_ms = EXCLUDED.scheduled_due_ms, \
     attempt = EXCLUDED.attempt, generation = EXCLUDED.generation, \
     completed_ms = EXCLUDED.completed_ms) \
     SELECT id, generation, claim FROM acked";

/// See [`Sql::ack_held_unrecorded`].
const ACK_HELD_UNRECORDED: &str = "WITH acked AS (DELETE FROM {schema}.tasks t \
     USING unnest($3::text[], $4::int8[], $5::int8[]) AS k(id, generation, claim) \
     WHERE t.queue = $1 AND t.idx = $2 AND t.id = k.id AND t.id = ANY($3) AND t.state = 'inflight' \
     AND t.generation = k.generation AND t.claim = k.claim \
     RETURNING t.id, t.generation, t.claim), \
     forgotten AS (DELETE FROM {schema}.done d USING acked \
     WHERE d.queue = $1 AND d.idx = $2 AND d.id = acked.id AND d.id = ANY($3)) \
     SELECT id, generation, claim FROM acked";

/// The lock of the partition's row as the first step of a statement, and the database clock
/// read with it: what `Part::lock` does, for a statement committed on its own.
const LOCK_FIRST: &str =
    "WITH p AS MATERIALIZED (SELECT {now} AS now_ms FROM {schema}.partitions p \
     WHERE p.queue = $1 AND p.idx = $2 FOR UPDATE OF p), acked AS (DELETE FROM {schema}.tasks t \
     USING unnest($3::text[], $4::int8[], $5::int8[]) AS k(id, generation, claim) \
     WHERE (SELECT true FROM p) AND ";

/// `statement` (one of the `ack_held` pair, in a partition's transaction) as a statement of
/// its own: the lock first, the clock from it.
fn ack_at_once(statement: &str) -> String {
    const IN_TRANSACTION: &str = "WITH acked AS (DELETE FROM {schema}.tasks t \
     USING unnest($3::text[], $4::int8[], $5::int8[]) AS k(id, generation, claim) \
     WHERE ";
    debug_assert!(statement.starts_with(IN_TRANSACTION));
    statement
        .replacen(IN_TRANSACTION, LOCK_FIRST, 1)
        .replace("$6", "(SELECT p.now_ms FROM p)")
}

impl Sql {
    pub(crate) fn new(schema: &Schema) -> Self {
        let mut sql = Self::in_transactions(schema);
        let s = |template: &str| schema.substitute(template).replace("{now}", NOW_MS);
        sql.ack_held_at_once = s(&ack_at_once(ACK_HELD));
        sql.ack_held_unrecorded_at_once = s(&ack_at_once(ACK_HELD_UNRECORDED));
        sql
    }

    fn in_transactions(schema: &Schema) -> Self {
        let s = |template: &str| schema.substitute(template).replace("{now}", NOW_MS);
        let task_key = "queue = $1 AND idx = $2 AND id = $3";
        Sql {
            ensure_partition: s(
                "INSERT INTO {schema}.partitions (queue, idx) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            ),
            lock_partition: s(
                "SELECT p.sequence, {now}, (extract(epoch FROM clock_timestamp()) * 1000000)::int8, \
                 (SELECT q.partitions FROM {schema}.queues q WHERE q.queue = $1), \
                 (p.paused OR EXISTS (SELECT 1 FROM {schema}.paused z WHERE z.queue = $1)) \
                 FROM {schema}.partitions p WHERE p.queue = $1 AND p.idx = $2 FOR UPDATE OF p",
            ),
            store_sequence: s(
                "UPDATE {schema}.partitions SET sequence = $3 WHERE queue = $1 AND idx = $2",
            ),
            queue_partitions: s("SELECT partitions FROM {schema}.queues WHERE queue = $1"),

            select_task: s(&format!(
                "SELECT state, at_ms, due_ms, scheduled_due_ms, attempt, generation, claim, payload, \
                 last_error, traceparent FROM {{schema}}.tasks WHERE {task_key}"
            )),
            present_ids: s(
                "SELECT id FROM {schema}.tasks WHERE queue = $1 AND idx = $2 AND id = ANY($3) \
                 UNION SELECT id FROM {schema}.done WHERE queue = $1 AND idx = $2 AND id = ANY($3)",
            ),
            put_pending: s(
                "INSERT INTO {schema}.tasks (queue, idx, id, state, at_ms, due_ms, scheduled_due_ms, \
                 attempt, generation, claim, payload, last_error, traceparent) \
                 VALUES ($1, $2, $3, 'pending', $4, $4, $4, 1, $5, NULL, $6, NULL, $7) \
                 ON CONFLICT (queue, idx, id) DO UPDATE SET state = 'pending', at_ms = $4, \
                 due_ms = $4, scheduled_due_ms = $4, attempt = 1, generation = $5, claim = NULL, \
                 payload = $6, last_error = NULL, traceparent = $7",
            ),
            delete_task: s(&format!("DELETE FROM {{schema}}.tasks WHERE {task_key}")),
            cancel_inflight: s(&format!(
                "UPDATE {{schema}}.tasks SET generation = 0, traceparent = NULL WHERE {task_key}"
            )),
            make_pending: s(&format!(
                "UPDATE {{schema}}.tasks SET state = 'pending', at_ms = $4, due_ms = $5, \
                 attempt = $6, last_error = $7, claim = NULL WHERE {task_key}"
            )),
            make_dead: s(&format!(
                "UPDATE {{schema}}.tasks SET state = 'dead', at_ms = $4, last_error = $5, \
                 claim = NULL WHERE {task_key}"
            )),
            renew: s(&format!(
                "UPDATE {{schema}}.tasks SET at_ms = $4 WHERE {task_key}"
            )),
            retry_dead: s(&format!(
                "UPDATE {{schema}}.tasks SET state = 'pending', at_ms = $4, due_ms = $4, \
                 attempt = 1 WHERE {task_key} AND state = 'dead'"
            )),

            select_superseded: s(&format!(
                "SELECT claim, lease_deadline_ms FROM {{schema}}.superseded WHERE {task_key}"
            )),
            put_superseded: s(
                "INSERT INTO {schema}.superseded (queue, idx, id, claim, lease_deadline_ms) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (queue, idx, id) \
                 DO UPDATE SET claim = $4, lease_deadline_ms = $5",
            ),
            delete_superseded: s(&format!(
                "DELETE FROM {{schema}}.superseded WHERE {task_key}"
            )),

            select_done: s(&format!(
                "SELECT due_ms, scheduled_due_ms, attempt, generation, completed_ms \
                 FROM {{schema}}.done WHERE {task_key}"
            )),
            put_done: s(
                "INSERT INTO {schema}.done (queue, idx, id, due_ms, scheduled_due_ms, attempt, \
                 generation, completed_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (queue, idx, id) DO UPDATE SET due_ms = $4, scheduled_due_ms = $5, \
                 attempt = $6, generation = $7, completed_ms = $8",
            ),
            delete_done: s(&format!("DELETE FROM {{schema}}.done WHERE {task_key}")),
            // Answers how many records went and the prune floor's makings: the earliest
            // completion left at or after the cutoff, and the database clock. It runs in the
            // partition's transaction (its row locked), so no record of the partition is
            // completed meanwhile. The store calls it only when a record may be older than the
            // cutoff (see `PruneFloors`): a plan made while `done` looked empty may walk the
            // partition's records, which a look during a burst must not pay for.
            prune_done: s(
                "WITH doomed AS MATERIALIZED (SELECT id FROM {schema}.done \
                 WHERE queue = $1 AND idx = $2 AND completed_ms < $3 \
                 ORDER BY completed_ms, id LIMIT $4), \
                 gone AS (DELETE FROM {schema}.done d WHERE d.queue = $1 AND d.idx = $2 \
                 AND d.id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING 1) \
                 SELECT (SELECT count(*) FROM gone)::int8, \
                 (SELECT min(completed_ms) FROM {schema}.done \
                 WHERE queue = $1 AND idx = $2 AND completed_ms >= $3), {now}",
            ),

            due_tasks: s(
                "SELECT id, due_ms, attempt, generation, payload, traceparent FROM {schema}.tasks \
                 WHERE queue = $1 AND idx = $2 AND state = 'pending' AND at_ms <= $3 \
                 ORDER BY at_ms, id LIMIT $4 FOR UPDATE SKIP LOCKED",
            ),
            // The statements of one WITH see one snapshot: the earliest pending time left
            // leaves out the ids this claim takes.
            mark_claimed: s(
                "WITH claimed AS (UPDATE {schema}.tasks t SET state = 'inflight', at_ms = $5, \
                 claim = c.claim FROM unnest($3::text[], $4::int8[]) AS c(id, claim) \
                 WHERE t.queue = $1 AND t.idx = $2 AND t.id = c.id AND t.id = ANY($3) RETURNING 1), \
                 forgotten AS (DELETE FROM {schema}.superseded WHERE queue = $1 AND idx = $2 \
                 AND id = ANY($3) RETURNING 1), \
                 receipt AS (UPDATE {schema}.partitions SET receipt_owner = $6, \
                 receipt_lease_ms = $5, receipt_ids = $3, receipt_claims = $4, sequence = $7 \
                 WHERE queue = $1 AND idx = $2 RETURNING 1) \
                 SELECT min(at_ms) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 \
                 AND state = 'pending' AND id <> ALL($3)",
            ),
            // Every join on ids also names them in an `= ANY(...)`: an index condition on the
            // whole primary key whatever the planner believes of the table's size (with the
            // statistics of a table just filled, it walked the partition's every task per
            // claim, 5 ms at 6,000 tasks).
            // The gates on `p` are uncorrelated subqueries, evaluated once before the scan of
            // the tasks: the partition's row is locked before any task is read, as in the
            // claim's transaction. The statement's snapshot may predate the lock's release by
            // the previous claimer; its tasks are re-checked when locked (the state has moved
            // on), and what it made pending meanwhile waits for the next claim. The next due
            // the statement reports is read with that snapshot too, so a task made pending by
            // a transaction that committed while the statement waited for the lock is missing
            // from it: a schedule's own wake-up (`pg_notify` at its commit) or the partition's
            // next look finds that task, never a claim's report alone.
            claim_at_once: s(
                "WITH p AS MATERIALIZED (SELECT p.sequence, {now} AS now_ms, \
                 (extract(epoch FROM clock_timestamp()) * 1000000)::int8 AS now_us, \
                 (SELECT q.partitions FROM {schema}.queues q WHERE q.queue = $1) AS partitions, \
                 (p.paused OR EXISTS (SELECT 1 FROM {schema}.paused z WHERE z.queue = $1)) AS paused \
                 FROM {schema}.partitions p WHERE p.queue = $1 AND p.idx = $2 FOR UPDATE OF p), \
                 due AS MATERIALIZED (SELECT t.id, t.at_ms, t.due_ms, t.attempt, t.generation, \
                 t.payload, t.traceparent FROM {schema}.tasks t \
                 WHERE (SELECT NOT p.paused AND (p.partitions IS NULL OR $2 < p.partitions) FROM p) \
                 AND t.queue = $1 AND t.idx = $2 AND t.state = 'pending' \
                 AND t.at_ms <= least($3::int8, (SELECT p.now_ms FROM p)) \
                 AND t.id <> '' AND octet_length(t.id) <= 512 \
                 ORDER BY t.at_ms, t.id LIMIT $4 FOR UPDATE OF t SKIP LOCKED), \
                 numbered AS (SELECT d.*, row_number() OVER w AS k, \
                 sum(octet_length(d.payload)) OVER w AS bytes FROM due d \
                 WINDOW w AS (ORDER BY d.at_ms, d.id)), \
                 taken AS MATERIALIZED (SELECT n.id, n.due_ms, n.attempt, n.generation, n.payload, \
                 n.traceparent, n.k, (SELECT greatest(p.sequence + 1, p.now_us) FROM p) + n.k - 1 AS claim \
                 FROM numbered n WHERE n.k = 1 OR n.bytes <= $5::int8), \
                 claimed AS (UPDATE {schema}.tasks t SET state = 'inflight', at_ms = $6, \
                 claim = k.claim FROM taken k WHERE t.queue = $1 AND t.idx = $2 AND t.id = k.id \
                 AND t.id = ANY (ARRAY(SELECT id FROM taken)) \
                 RETURNING 1), \
                 forgotten AS (DELETE FROM {schema}.superseded s USING taken k \
                 WHERE s.queue = $1 AND s.idx = $2 AND s.id = k.id \
                 AND s.id = ANY (ARRAY(SELECT id FROM taken)) RETURNING 1), \
                 receipt AS (UPDATE {schema}.partitions SET receipt_owner = $7::text, \
                 receipt_lease_ms = $6, \
                 receipt_ids = (SELECT array_agg(k.id ORDER BY k.k) FROM taken k), \
                 receipt_claims = (SELECT array_agg(k.claim ORDER BY k.k) FROM taken k), \
                 sequence = (SELECT max(k.claim) FROM taken k) \
                 WHERE queue = $1 AND idx = $2 AND EXISTS (SELECT 1 FROM taken) RETURNING 1) \
                 SELECT p.partitions, p.paused, (SELECT min(n.at_ms) FROM {schema}.tasks n \
                 WHERE n.queue = $1 AND n.idx = $2 AND n.state = 'pending' \
                 AND n.id NOT IN (SELECT k.id FROM taken k)), \
                 k.id, k.due_ms, k.attempt, k.generation, k.payload, k.traceparent, k.claim \
                 FROM p LEFT JOIN taken k ON true ORDER BY k.k",
            ),
            select_receipt: s(
                "SELECT receipt_owner, receipt_lease_ms, receipt_ids, receipt_claims \
                 FROM {schema}.partitions WHERE queue = $1 AND idx = $2",
            ),
            next_due: s(
                "SELECT min(at_ms) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 \
                 AND state = 'pending'",
            ),
            next_due_after: s(
                "SELECT min(at_ms) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 \
                 AND state = 'pending' AND at_ms > $3",
            ),
            pending_heads: s(
                "SELECT p.ordinal, (SELECT min(at_ms) FROM {schema}.tasks t \
                 WHERE t.queue = p.queue AND t.idx = p.idx AND t.state = 'pending') \
                 FROM unnest($1::text[], $2::integer[]) WITH ORDINALITY AS p(queue, idx, ordinal)",
            ),
            window: s(
                "SELECT id, at_ms FROM {schema}.tasks WHERE queue = $1 AND idx = $2 \
                 AND state = 'pending' AND at_ms >= $3 AND at_ms <= $4 \
                 ORDER BY at_ms, id LIMIT $5",
            ),
            earliest_lease: s(
                "SELECT least((SELECT min(at_ms) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 \
                 AND state = 'inflight'), (SELECT min(lease_deadline_ms) FROM {schema}.superseded \
                 WHERE queue = $1 AND idx = $2))",
            ),
            expired_leases: s(
                "SELECT id, at_ms, false FROM {schema}.tasks WHERE queue = $1 AND idx = $2 \
                 AND state = 'inflight' AND at_ms < $3 \
                 UNION ALL SELECT id, lease_deadline_ms, true FROM {schema}.superseded \
                 WHERE queue = $1 AND idx = $2 AND lease_deadline_ms < $3 \
                 ORDER BY 2, 1 LIMIT $4",
            ),
            // The scalars are a CTE of their own, read once: in the select list beside the
            // window they were subplans run once per window row (4 buffers each).
            look_at_once: s(
                "WITH c AS MATERIALIZED (SELECT least($3::int8, {now}) AS now_ms, \
                 (SELECT q.partitions FROM {schema}.queues q WHERE q.queue = $1) AS partitions, \
                 EXISTS (SELECT 1 FROM {schema}.partitions p WHERE p.queue = $1 AND p.idx = $2) \
                 AS present), \
                 s AS MATERIALIZED (SELECT c.partitions, c.present, \
                 EXISTS (SELECT 1 FROM {schema}.tasks x WHERE x.queue = $1 AND x.idx = $2 \
                 AND x.state = 'inflight' AND x.at_ms < c.now_ms) \
                 OR EXISTS (SELECT 1 FROM {schema}.superseded y WHERE y.queue = $1 AND y.idx = $2 \
                 AND y.lease_deadline_ms < c.now_ms) AS expired, \
                 (SELECT min(n.at_ms) FROM {schema}.tasks n WHERE n.queue = $1 AND n.idx = $2 \
                 AND n.state = 'pending' AND n.at_ms > $4::int8) AS next_after, \
                 least((SELECT min(f.at_ms) FROM {schema}.tasks f WHERE f.queue = $1 AND f.idx = $2 \
                 AND f.state = 'inflight'), (SELECT min(g.lease_deadline_ms) FROM {schema}.superseded g \
                 WHERE g.queue = $1 AND g.idx = $2)) AS earliest FROM c), \
                 w AS MATERIALIZED (SELECT t.id, t.at_ms FROM {schema}.tasks t \
                 WHERE t.queue = $1 AND t.idx = $2 AND t.state = 'pending' AND t.at_ms <= $4::int8 \
                 ORDER BY t.at_ms, t.id LIMIT $5) \
                 SELECT s.partitions, s.present, s.expired, s.next_after, s.earliest, w.id, w.at_ms \
                 FROM s LEFT JOIN w ON true ORDER BY w.at_ms, w.id",
            ),

            stats: s(
                "SELECT \
                 (SELECT count(*) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 AND state = 'pending'), \
                 (SELECT count(*) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 AND state = 'pending' AND at_ms <= $3), \
                 (SELECT count(*) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 AND state = 'inflight') \
                 + (SELECT count(*) FROM {schema}.superseded WHERE queue = $1 AND idx = $2), \
                 (SELECT count(*) FROM {schema}.tasks WHERE queue = $1 AND idx = $2 AND state = 'dead'), \
                 (SELECT count(*) FROM {schema}.done WHERE queue = $1 AND idx = $2)",
            ),
            list_dead: s(
                "SELECT id, due_ms, attempt, at_ms, last_error, payload FROM {schema}.tasks \
                 WHERE queue = $1 AND idx = $2 AND state = 'dead' ORDER BY at_ms, id LIMIT $3",
            ),
            peek_dead: s(
                "SELECT id, at_ms FROM {schema}.tasks \
                 WHERE queue = $1 AND idx = $2 AND state = 'dead' ORDER BY at_ms, id LIMIT $3",
            ),
            dead_ids: s(
                "SELECT id FROM {schema}.tasks WHERE queue = $1 AND idx = $2 AND state = 'dead'",
            ),

            ack_held: s(ACK_HELD),
            ack_held_unrecorded: s(ACK_HELD_UNRECORDED),
            ack_held_at_once: String::new(),
            ack_held_unrecorded_at_once: String::new(),
            tick_exists: s(&format!(
                "SELECT EXISTS (SELECT 1 FROM {{schema}}.ticks WHERE {task_key})"
            )),
            put_tick: s(
                "INSERT INTO {schema}.ticks (queue, idx, id, due_ms) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT DO NOTHING",
            ),
            forget_ticks: s(
                "DELETE FROM {schema}.ticks WHERE queue = $1 AND idx = $2 AND id = ANY($3)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acks_at_once_lock_the_partition_first_and_take_the_database_clock() {
        let sql = Sql::new(&Schema::new("delayq").expect("valid schema"));
        for statement in [&sql.ack_held_at_once, &sql.ack_held_unrecorded_at_once] {
            assert!(
                statement.starts_with(
                    "WITH p AS MATERIALIZED (SELECT (extract(epoch FROM clock_timestamp())"
                ),
                "{statement}"
            );
            assert!(statement.contains("FOR UPDATE OF p"), "{statement}");
            assert!(
                statement.contains("WHERE (SELECT true FROM p) AND t.queue = $1"),
                "{statement}"
            );
            assert!(!statement.contains("$6"), "{statement}");
            assert!(
                !statement.contains("{schema}") && !statement.contains("{now}"),
                "{statement}"
            );
        }
        assert!(sql
            .ack_held_at_once
            .contains("(SELECT p.now_ms FROM p) FROM acked"));
    }
}
