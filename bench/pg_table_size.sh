#!/bin/bash
# Part of BENCHMARKS.md (issue 25: "table and index size after 1,000,000 tasks fired and
# pruned: back within 2x the empty size"). Needs PostgreSQL's server binaries (initdb,
# postgres; the Debian package `postgresql`), psql and python3.
#
# 3 `delayq node --handler log` processes with `backend: postgres` on one private PostgreSQL
# (bench/pg_private.sh: initdb in a temp dir, fsync, synchronous_commit and full_page_writes
# off as the tests run it), at the documented defaults except `engine.executed_retention`
# (RETENTION, default 60s instead of 1h, so that the done records are pruned within the run);
# autovacuum at PostgreSQL's defaults (on, autovacuum_naptime 1 min, vacuum scale factor 0.2). It measures pg_total_relation_size,
# pg_relation_size (main fork), pg_indexes_size and each index's size of every table of the
# schema `delayq`, with pg_stat_user_tables (live/dead tuples, autovacuum counts):
#   empty   after the migration and the 3 nodes joined, nothing scheduled
#   fired   after N tasks were scheduled and fired, in ROUNDS rounds of N/ROUNDS (each round
#           is loaded with `delayq schedule size --from FILE`, due LEAD_S after its load
#           starts, and waited for until every task fired and was acked)
#   pruned  after the done records are pruned (`done` empty) and autovacuum had a chance:
#           polled every 10 s until `done` is empty and no table has more than DEAD_MAX dead
#           tuples (pg_stat_user_tables.n_dead_tup), at most PRUNE_TIMEOUT_S, then SETTLE_S
#           more for autovacuum to run after the last prunes ("settled": false when it timed out)
# With DIAG=1 (the default) diagnostics follow, after `pruned` was measured, to tell what holds
# the remaining space: pgstattuple / pgstatindex of the pruned state, `vacuumed` (a manual
# VACUUM of every table of the schema), `reindexed` (then REINDEX TABLE CONCURRENTLY of each) and `compacted` (then VACUUM FULL of
# `partitions`), each with its ratio to empty. They take no part in ratio_total.
# EXTRA_SQL (none): SQL run once after the migration, before the nodes start, e.g. candidate
# storage parameters ('ALTER TABLE delayq.done SET (autovacuum_vacuum_scale_factor = 0)');
# the result names it.
# Prints one JSON line per round ({"round": ...}), then one JSON line with the settings, every
# phase and ratio_total = pruned total / empty total (over all tables of the schema), then with
# DIAG=1 one line {"diagnostic": ...}.
# usage: pg_table_size.sh BINARY PORT [N=1000000]
# Environment: ROUNDS (10), RETENTION (60s), LEAD_S (60), DEAD_MAX (1000), PRUNE_TIMEOUT_S
# (1800), SETTLE_S (120), QUEUE_DEFAULTS (inside of a YAML flow mapping, e.g.
# 'concurrency: 512'; none), DIAG (1), EXTRA_SQL (none), PG_BIN, KEEP=1.
set -euo pipefail
BIN=$(readlink -f "$1"); P=$2; N=${3:-1000000}
ROUNDS=${ROUNDS:-10}; RETENTION=${RETENTION:-60s}; LEAD_S=${LEAD_S:-60}; DEAD_MAX=${DEAD_MAX:-1000}
PRUNE_TIMEOUT_S=${PRUNE_TIMEOUT_S:-1800}; SETTLE_S=${SETTLE_S:-120}; QUEUE_DEFAULTS=${QUEUE_DEFAULTS:-}; DIAG=${DIAG:-1}
. "$(dirname "$0")/pg_private.sh"
pg_private_start "$P"
cat > "$D/cluster.yaml" <<YAML
backend: postgres
postgres:
  url: $URL
engine:
  executed_retention: $RETENTION
YAML
if [ -n "$QUEUE_DEFAULTS" ]; then echo "queue_defaults: { $QUEUE_DEFAULTS }" >> "$D/cluster.yaml"; fi
"$BIN" --config "$D/cluster.yaml" migrate >/dev/null
if [ -n "${EXTRA_SQL:-}" ]; then psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P" -U postgres -c "$EXTRA_SQL" postgres; fi
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i "$BIN" --config "$D/cluster.yaml" node --handler log > "$D/out$i.jsonl" 2>"$D/err$i.log" &
  echo $! >> "$D/pids"
done
status=0
python3 - "$D" "$P" "$N" "$BIN" "$ROUNDS" "$RETENTION" "$LEAD_S" "$DEAD_MAX" "$PRUNE_TIMEOUT_S" \
  "$QUEUE_DEFAULTS" "$DIAG" "$SETTLE_S" <<'PY' || status=$?
import sys, time, subprocess, json, os
D, P, N, BIN = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ROUNDS, RETENTION, LEAD_S = int(sys.argv[5]), sys.argv[6], int(sys.argv[7])
DEAD_MAX, PRUNE_TIMEOUT_S = int(sys.argv[8]), int(sys.argv[9])
QUEUE_DEFAULTS, DIAG = sys.argv[10], sys.argv[11] == "1"
SETTLE_S = int(sys.argv[12])
CONFIG = D + "/cluster.yaml"
SCHEMA = "delayq"
QUEUE = "size"
t_start = time.time()

def psql(sql):
    return subprocess.run(["psql", "-X", "-A", "-t", "-q", "-F", "\t", "-h", "127.0.0.1", "-p", P,
                           "-U", "postgres", "-c", sql, "postgres"],
                          capture_output=True, text=True, check=True).stdout.strip()

def rows(sql):
    return [line.split("\t") for line in psql(sql).splitlines() if line]

def scalar(sql):
    return int(psql(sql) or 0)

def number(text):
    return None if text in ("", "NaN") else float(text)

def elapsed():
    return round(time.time() - t_start)

def measure():
    """Sizes, counts and autovacuum figures of every table of the schema."""
    tables = {}
    for name, total, heap, indexes, toast in rows(
            "SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), "
            "pg_indexes_size(c.oid), coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = '{SCHEMA}' AND c.relkind = 'r' ORDER BY c.relname"):
        tables[name] = {"total": int(total), "heap": int(heap), "indexes": int(indexes),
                        "toast": int(toast), "index_sizes": {}}
    for table, index, size in rows(
            "SELECT t.relname, i.relname, pg_relation_size(i.oid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            f"JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = '{SCHEMA}' ORDER BY 1, 2"):
        tables[table]["index_sizes"][index] = int(size)
    for (name, live, dead, ins, upd, hot, dele, avc, last_av, vc, mod) in rows(
            "SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, "
            "autovacuum_count, coalesce(to_char(last_autovacuum AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), ''), vacuum_count, n_mod_since_analyze "
            f"FROM pg_stat_user_tables WHERE schemaname = '{SCHEMA}'"):
        tables[name].update({"live_tup": int(live), "dead_tup": int(dead), "tup_ins": int(ins),
                             "tup_upd": int(upd), "tup_hot_upd": int(hot), "tup_del": int(dele),
                             "autovacuum_count": int(avc), "last_autovacuum": last_av or None,
                             "vacuum_count": int(vc)})
    for name in tables:
        tables[name]["rows"] = scalar(f"SELECT count(*) FROM {SCHEMA}.{name}")
    totals = {k: sum(t[k] for t in tables.values()) for k in ("total", "heap", "indexes", "toast")}
    return {"at_s": elapsed(), "totals": totals, "tables": tables}

def wait(condition, timeout, step=1.0):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return True
        time.sleep(step)
    return condition()

class Fires:
    """Distinct ids fired, read from the nodes' stdout as it grows."""
    def __init__(self):
        self.offsets, self.ids, self.deliveries = {}, set(), 0
    def count(self):
        for i in (1, 2, 3):
            path = f"{D}/out{i}.jsonl"
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path] = self.offsets.get(path, 0) + end
            for line in data[:end].splitlines():
                try:
                    fire = json.loads(line)
                except ValueError:
                    continue
                if fire.get("queue") == QUEUE:
                    self.deliveries += 1
                    self.ids.add(fire["id"])
        return len(self.ids)

def fail(message, **extra):
    print(json.dumps({"error": message, **extra}), flush=True)
    sys.exit(1)

if not wait(lambda: scalar(f"SELECT count(*) FROM {SCHEMA}.nodes") == 3, 60, 0.5):
    fail("the 3 nodes did not join within 60 s")
time.sleep(5)  # the first heartbeats and rebalance settle
empty = measure()

fires = Fires()
per_round = N // ROUNDS
scheduled = 0
round_lines = []
for r in range(ROUNDS):
    count = per_round if r < ROUNDS - 1 else N - scheduled
    path = f"{D}/round.jsonl"
    t_load = time.time()
    due = int(t_load * 1000) + LEAD_S * 1000
    with open(path, "w") as f:
        f.write("".join('{"id":"r%02d-%07d","due_ms":%d,"payload":"%s"}\n' % (r, i, due, "p" * 50)
                        for i in range(count)))
    subprocess.run([BIN, "--config", CONFIG, "schedule", QUEUE, "--from", path],
                   stdout=subprocess.DEVNULL, stderr=open(D + "/load.err", "a"), check=True)
    load_s = round(time.time() - t_load, 1)
    scheduled += count
    if not wait(lambda: fires.count() >= scheduled, LEAD_S + 900, 0.5):
        fail("not every task fired within 900 s of its due", round=r, fired=fires.count(), scheduled=scheduled)
    fired_s = round(time.time() - due / 1000, 1)
    if not wait(lambda: scalar(f"SELECT count(*) FROM {SCHEMA}.tasks") == 0, 120):
        fail("tasks left in the table 120 s after the last fire", round=r)
    sizes = measure()
    line = {"round": r + 1, "tasks": count, "load_s": load_s, "all_fired_s_after_due": fired_s,
            "at_s": sizes["at_s"], "total": sizes["totals"]["total"], "heap": sizes["totals"]["heap"],
            "indexes": sizes["totals"]["indexes"], "done_rows": sizes["tables"]["done"]["rows"],
            "by_table": {name: t["total"] for name, t in sizes["tables"].items()}}
    round_lines.append(line)
    print(json.dumps(line), flush=True)
fired = measure()

# Pruned: done empty and autovacuum caught up with the dead tuples.
t_prune = time.time()
polls = []
def pruned_and_vacuumed():
    done = scalar(f"SELECT count(*) FROM {SCHEMA}.done")
    dead = dict((name, int(n)) for name, n in rows(
        f"SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE schemaname = '{SCHEMA}'"))
    polls.append({"at_s": elapsed(), "done_rows": done, "dead_tup": {k: v for k, v in dead.items() if v}})
    return done == 0 and max(dead.values()) <= DEAD_MAX
settled = wait(pruned_and_vacuumed, PRUNE_TIMEOUT_S, 10)
settled_at_s = elapsed()
# The last prunes may have left fewer dead tuples than DEAD_MAX: give autovacuum SETTLE_S more
# (two naptimes at the default) to vacuum (and truncate) after them.
if settled:
    time.sleep(SETTLE_S)
    pruned_and_vacuumed()
pruned = measure()
pruned["settled_at_s"] = settled_at_s
pruned["settled"] = settled
pruned["waited_s"] = round(time.time() - t_prune)
pruned["polls"] = polls[:: max(1, len(polls) // 30)] + polls[-1:]

settings = dict(rows("SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', "
                     "'autovacuum_naptime', 'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_threshold', "
                     "'autovacuum_vacuum_insert_scale_factor', 'autovacuum_vacuum_cost_limit', "
                     "'autovacuum_vacuum_cost_delay', 'server_version')"))
reloptions = dict(rows("SELECT c.relname, array_to_string(c.reloptions, ',') FROM pg_class c "
                       f"JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{SCHEMA}' "
                       "AND c.relkind = 'r' AND c.reloptions IS NOT NULL"))
result = {
    "tasks": N, "rounds": ROUNDS, "deliveries": fires.deliveries, "fired": fires.count(),
    "nodes": 3, "queue": QUEUE,
    "partitions": scalar(f"SELECT partitions FROM {SCHEMA}.queues WHERE queue = '{QUEUE}'"),
    "changed_from_defaults": {"engine.executed_retention": RETENTION,
                              **({"queue_defaults": QUEUE_DEFAULTS} if QUEUE_DEFAULTS else {}),
                              **({"extra_sql": os.environ["EXTRA_SQL"]} if os.environ.get("EXTRA_SQL") else {})},
    "postgres_settings": settings, "reloptions": reloptions, "elapsed_s": elapsed(),
    "empty": empty, "fired_phase": fired, "pruned": pruned,
    "ratio_total": round(pruned["totals"]["total"] / empty["totals"]["total"], 2),
    "ratio_total_fired_over_empty": round(fired["totals"]["total"] / empty["totals"]["total"], 2),
    "target": "pruned total <= 2 x empty total", "met": pruned["totals"]["total"] <= 2 * empty["totals"]["total"],
}
print(json.dumps(result), flush=True)
diag = {}
if DIAG:
    names = list(pruned["tables"])
    # Where the space of the pruned state is: free space and dead tuples of each heap, and each
    # index's pages (deleted pages are recycled by later inserts, never given back to the OS).
    psql("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    diag["heap_stats"] = {name: dict(zip(("table_len", "tuple_percent", "dead_tuple_percent", "free_percent"),
                                         map(number, rows(f"SELECT table_len, tuple_percent, dead_tuple_percent, "
                                                         f"free_percent FROM pgstattuple('{SCHEMA}.{name}')")[0])))
                          for name in names if pruned["tables"][name]["heap"] > 0}
    diag["index_stats"] = {}
    for (index,) in rows("SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                         f"JOIN pg_namespace n ON n.oid = i.relnamespace WHERE n.nspname = '{SCHEMA}' "
                         "AND pg_relation_size(i.oid) > 16384 ORDER BY 1"):
        stats = rows(f"SELECT index_size, leaf_pages, internal_pages, empty_pages, deleted_pages, "
                     f"avg_leaf_density FROM pgstatindex('{SCHEMA}.{index}')")[0]
        diag["index_stats"][index] = dict(zip(("index_size", "leaf_pages", "internal_pages", "empty_pages",
                                              "deleted_pages", "avg_leaf_density"), map(number, stats)))
    for name in names:
        psql(f"VACUUM {SCHEMA}.{name}")
    diag["vacuumed"] = measure()
    for name in names:
        psql(f"REINDEX TABLE CONCURRENTLY {SCHEMA}.{name}")
    diag["reindexed"] = measure()
    # The partitions table keeps a few rows (one per partition) spread over the pages its
    # updates wrote; only a rewrite gives those pages back (VACUUM FULL locks the table).
    psql(f"VACUUM FULL {SCHEMA}.partitions")
    diag["compacted"] = measure()
    for phase in ("vacuumed", "reindexed", "compacted"):
        diag[phase]["ratio_total"] = round(diag[phase]["totals"]["total"] / empty["totals"]["total"], 2)
    print(json.dumps({"diagnostic": diag}), flush=True)
PY
kill $(cat "$D/pids") 2>/dev/null || true; sleep 1
pg_private_stop
exit $status
