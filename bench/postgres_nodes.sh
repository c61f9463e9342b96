#!/bin/bash
# Part of BENCHMARKS.md (issue 25). Needs PostgreSQL's server binaries (initdb, postgres; the
# Debian package `postgresql`), psql and python3.
# 3 `delayq node --handler log` processes with `backend: postgres` on one private PostgreSQL
# (bench/pg_private.sh: initdb in a temp dir, fsync off as the tests run it, pg_stat_statements
# loaded), at the documented defaults unless QUEUE_DEFAULTS says otherwise. Prints one JSON line per scenario:
#   burst    N tasks due at one instant: tasks_per_s (N / (last fired - due)), node and
#            postgres CPU µs per task (/proc utime+stime of the nodes; of every postgres
#            process, plus the children the postmaster reaped), statements per task
#            (pg_stat_statements calls, delayq's schema only) and transactions per task
#            (pg_stat_database xact_commit + xact_rollback) over the fire phase
#   spread   N_SPREAD tasks due uniformly over the next SPREAD_S seconds: lateness p50/p99/max
#            (fired_ms - due_ms of each first delivery, cluster clock)
#   idle     IDLE_QUEUES queues x 16 partitions, one task each far in the future, nothing
#            due: transactions and statements per second over IDLE_S seconds, after the
#            cluster settled
# burst and idle also carry top_statements: delayq's 5 most called statements over the phase
# (pg_stat_statements, reset at its start: calls, rows, mean ms, text), and other_statements: the
# 5 most called others; burst also connection_samples: what delayq's connections were doing
# (pg_stat_activity state:wait event, summed over samples every 100 ms).
# usage: postgres_nodes.sh BINARY PORT [N]
# Environment: N_SPREAD (default 6000), SPREAD_S (60), IDLE_QUEUES (50), IDLE_S (60),
# LEAD_S (90: the burst is due that long after its load starts; `schedule --from` of 100,000
# took over 30 s on the shared machine), SCENARIOS (default "burst spread idle"),
# STATEMENT_DETAIL=1 (burst: also every statement's total time, buffers, WAL records and
# full-page images per call), QUEUE_DEFAULTS (inside of a YAML flow mapping, e.g. 'concurrency: 512'), PG_BIN (default:
# the newest /usr/lib/postgresql/*/bin), KEEP=1.
set -euo pipefail
BIN=$(readlink -f "$1"); P=$2; N=${3:-100000}
N_SPREAD=${N_SPREAD:-6000}; SPREAD_S=${SPREAD_S:-60}; IDLE_QUEUES=${IDLE_QUEUES:-50}; IDLE_S=${IDLE_S:-60}
LEAD_S=${LEAD_S:-90}
SCENARIOS=${SCENARIOS:-burst spread idle}; QUEUE_DEFAULTS=${QUEUE_DEFAULTS:-}
. "$(dirname "$0")/pg_private.sh"
pg_private_start "$P"
cat > "$D/cluster.yaml" <<YAML
backend: postgres
postgres:
  url: $URL
YAML
if [ -n "$QUEUE_DEFAULTS" ]; then echo "queue_defaults: { $QUEUE_DEFAULTS }" >> "$D/cluster.yaml"; fi
# The idle scenario's queues have 16 partitions each (the issue's 50 x 16).
echo "queues:" >> "$D/cluster.yaml"
for q in $(seq 0 $((IDLE_QUEUES - 1))); do printf '  idle-%02d: { partitions: 16 }\n' "$q" >> "$D/cluster.yaml"; done
"$BIN" --config "$D/cluster.yaml" migrate >/dev/null
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i "$BIN" --config "$D/cluster.yaml" node > "$D/out$i.jsonl" 2>"$D/err$i.log" &
  echo $! >> "$D/pids"
done
sleep 3
python3 - "$D" "$P" "$N" "$BIN" "$N_SPREAD" "$SPREAD_S" "$IDLE_QUEUES" "$IDLE_S" "$SCENARIOS" "$LEAD_S" <<'PY'
import sys, time, subprocess, json, glob, os, random
D, P, N, BIN = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
N_SPREAD, SPREAD_S, IDLE_QUEUES, IDLE_S = map(int, sys.argv[5:9])
SCENARIOS = sys.argv[9].split()
LEAD_S = int(sys.argv[10])
CONFIG = D + "/cluster.yaml"
tick = os.sysconf("SC_CLK_TCK")
pids = [int(x) for x in open(D + "/pids").read().split()]
postmaster = int(open(D + "/data/postmaster.pid").readline())

def psql(sql):
    return subprocess.run(["psql", "-X", "-A", "-t", "-q", "-h", "127.0.0.1", "-p", P, "-U", "postgres",
                           "-c", sql, "postgres"], capture_output=True, text=True, check=True).stdout.strip()

def stat(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return fields

def node_cpu():
    return sum(int(stat(p)[11]) + int(stat(p)[12]) for p in pids) / tick

def postgres_cpu():
    # Every live process of the server, and what the postmaster's reaped children used.
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
    statements = int(psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '%delayq%'") or 0)
    return xacts, statements

# The nodes' output, read on from where the last read stopped (a poll that parsed every line
# again took a core of its own during a burst of 100,000 and slowed what it measured).
seen, offsets, partial = [], {}, {}

def fires():
    for f in sorted(glob.glob(D + "/out*.jsonl")):
        with open(f, "rb") as handle:
            handle.seek(offsets.get(f, 0))
            chunk = handle.read()
            offsets[f] = handle.tell()
        lines = (partial.pop(f, b"") + chunk).split(b"\n")
        if lines[-1]:
            partial[f] = lines[-1]
        for line in lines[:-1]:
            try:
                seen.append(json.loads(line))
            except ValueError:
                pass
    return seen

def load(queue, lines):
    path = D + f"/{queue}.jsonl"
    with open(path, "w") as f:
        f.write("".join(lines))
    subprocess.run([BIN, "--config", CONFIG, "schedule", queue, "--from", path],
                   stdout=subprocess.DEVNULL, stderr=open(D + "/load.err", "a"), check=True)

def wait_for(count, timeout):
    end = time.time() + timeout
    while len(fires()) < count and time.time() < end:
        time.sleep(0.2)

def top_statements(limit=5, other=False):
    # The most called statements of delayq's schema since the last reset: [calls, query start];
    # other=True: the others (BEGIN, COMMIT, pool checks...), which the statement counts leave out.
    where = "NOT LIKE '%delayq%'" if other else "LIKE '%delayq%'"
    rows = psql("SELECT calls, rows, round(mean_exec_time::numeric, 3), "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_statements "
                "WHERE query " + where + " AND query NOT LIKE '%pg_stat_%' ORDER BY calls DESC LIMIT " + str(limit))
    return [r.split("|", 3) for r in rows.splitlines()]

def sample_waits(stop, samples):
    # What delayq's connections are doing, every 100 ms: state and wait event.
    while not stop.is_set():
        for row in psql("SELECT state || ':' || coalesce(wait_event_type || '/' || wait_event, 'cpu'), "
                        "count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
                        "GROUP BY 1").splitlines():
            key, count = row.rsplit("|", 1)
            samples[key] = samples.get(key, 0) + int(count)
        stop.wait(0.1)

def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1)))]

fired_before = 0
if "burst" in SCENARIOS:
    t_load = time.time()
    due = int(t_load * 1000) + LEAD_S * 1000
    load("burst", ['{"id":"t-%07d","due_ms":%d,"payload":"%s"}\n' % (i, due, "p" * 50) for i in range(N)])
    load_s = round(time.time() - t_load, 1)
    if time.time() * 1000 > due - 500:
        print(json.dumps({"error": "the load took too long: the due instant passed"}), flush=True)
    while time.time() * 1000 < due - 50:
        time.sleep(0.01)
    psql("SELECT pg_stat_statements_reset()")
    n0, c0, (x0, s0) = node_cpu(), postgres_cpu(), counters()
    import threading
    stop, waits = threading.Event(), {}
    sampler = threading.Thread(target=sample_waits, args=(stop, waits))
    sampler.start()
    wait_for(N, 300)
    stop.set()
    sampler.join()
    n1, c1, (x1, s1) = node_cpu(), postgres_cpu(), counters()
    top, other = top_statements(), top_statements(other=True)
    detail = []
    if os.environ.get("STATEMENT_DETAIL"):
        # Where the server's time went: every statement by total time, with its buffers and
        # WAL records per call.
        detail = [r.split("|", 6) for r in psql(
            "SELECT calls, round(total_exec_time::numeric), "
            "round((shared_blks_hit + shared_blks_read)::numeric / calls, 1), "
            "round(shared_blks_dirtied::numeric / calls, 2), round(wal_records::numeric / calls, 1), "
            "round(wal_fpi::numeric / calls, 2), left(regexp_replace(query, '\\s+', ' ', 'g'), 70) "
            "FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_%' "
            "ORDER BY total_exec_time DESC LIMIT 8").splitlines()]
    burst = [f for f in fires() if f["queue"] == "burst"]
    last = max(f["fired_ms"] for f in burst)
    print(json.dumps({"scenario": "burst", "tasks": N, "deliveries": len(burst),
                      "tasks_per_s": round(N / ((last - due) / 1000)), "drain_ms": last - due, "load_s": load_s,
                      "node_cpu_us_per_task": round((n1 - n0) * 1e6 / N, 1),
                      "postgres_cpu_us_per_task": round((c1 - c0) * 1e6 / N, 1),
                      "statements_per_task": round((s1 - s0) / N, 3),
                      "transactions_per_task": round((x1 - x0) / N, 3),
                      "connection_samples": dict(sorted(waits.items(), key=lambda kv: -kv[1])),
                      "top_statements": top,
                      "other_statements": other,
                      **({"statement_detail": detail} if detail else {})}), flush=True)
    fired_before = len(fires())

if "spread" in SCENARIOS:
    now = int(time.time() * 1000) + 2000
    rng = random.Random(7)
    dues = [now + rng.randrange(SPREAD_S * 1000) for _ in range(N_SPREAD)]
    load("spread", ['{"id":"s-%06d","due_ms":%d}\n' % (i, due) for i, due in enumerate(dues)])
    wait_for(fired_before + N_SPREAD, SPREAD_S + 60)
    spread = [f for f in fires() if f["queue"] == "spread"]
    first = {}
    for f in spread:
        if f["id"] not in first or f["fired_ms"] < first[f["id"]]["fired_ms"]:
            first[f["id"]] = f
    late = [f["fired_ms"] - f["due_ms"] for f in first.values()]
    print(json.dumps({"scenario": "spread", "tasks": N_SPREAD, "over_s": SPREAD_S,
                      "fired": len(first), "lateness_ms_p50": pct(late, 0.5),
                      "lateness_ms_p99": pct(late, 0.99), "lateness_ms_max": max(late),
                      "early": sum(1 for x in late if x < 0)}), flush=True)

if "idle" in SCENARIOS:
    far = int(time.time() * 1000) + 30 * 24 * 3600 * 1000
    for q in range(IDLE_QUEUES):
        load(f"idle-{q:02d}", ['{"id":"far","due_ms":%d}\n' % far])
    # Let the partitions go idle (one idle period and a half at the default 30 s).
    time.sleep(50)
    psql("SELECT pg_stat_statements_reset()")
    n0, c0, (x0, s0), t0 = node_cpu(), postgres_cpu(), counters(), time.time()
    time.sleep(IDLE_S)
    n1, c1, (x1, s1), t1 = node_cpu(), postgres_cpu(), counters(), time.time()
    seconds = t1 - t0
    print(json.dumps({"scenario": "idle", "queues": IDLE_QUEUES, "partitions": IDLE_QUEUES * 16,
                      "seconds": round(seconds), "transactions_per_s": round((x1 - x0) / seconds, 1),
                      "statements_per_s": round((s1 - s0) / seconds, 1),
                      "node_cpu_pct": round((n1 - n0) * 100 / seconds, 2),
                      "postgres_cpu_pct": round((c1 - c0) * 100 / seconds, 2),
                      "top_statements": top_statements(),
                      "other_statements": top_statements(other=True)}), flush=True)
PY
kill $(cat "$D/pids") 2>/dev/null || true; sleep 1
pg_private_stop
