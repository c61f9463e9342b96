#!/bin/bash
# Part of BENCHMARKS.md (issue 16). Needs redis-server, redis-cli, python3 and ss.
# Idle cost of a delayq fleet, measured from outside: one private redis-server, Q queues of
# 64 partitions (each created by scheduling one task due in 24 h into it), N `delayq node
# --handler log` processes (stdout to /dev/null). Once all N are in the registry, WARMUP
# seconds pass, then MEASURE seconds are sampled: Redis INFO stats / cpu / commandstats deltas
# and every node's utime+stime (/proc/<pid>/stat) and RSS. One Markdown table row per run:
#   N | Q | members at end (registry HLEN; processes that exited are flagged) | membership
#   epoch bumps over the span | Redis commands/s | Redis output KiB/s | Redis CPU % | commands/s
#   per node | output B/s per node | mean CPU % per node (per node: over the node processes
#   alive through the span) | nodes' CPU % in all | mean (max)
#   RSS MB | top 3 commands by calls/s (commandstats: commands run inside scripts count too)
#   | CPU % of everything else on the machine over the span (other builds: the noise)
# CPU % is of one core (this machine has `nproc` of them). Progress goes to stderr.
#
# usage: fleet.sh BINARY [PORT] [N] [Q]      one run (PORT empty or 0: a free port)
#        fleet.sh --matrix BINARY [PORT]     every N in MATRIX_NODES x every Q in MATRIX_QUEUES
# env:   WARMUP=15 MEASURE=30 (seconds), MATRIX_NODES="10 40 120", MATRIX_QUEUES="1 100 300",
#        JOIN_TIMEOUT=180 (seconds to wait for N members; the run is measured anyway and its
#        row says so), YAML_EXTRA (text appended to the generated cluster.yaml, e.g.
#        $'engine:\n  idle_pull_period: 30s'), KEEP=1 (keep the temp dir of each run).
# Every process it starts is stopped on exit, Ctrl-C or TERM (nodes: TERM, then KILL after
# 15 s; redis: SHUTDOWN NOSAVE, then KILL).
set -u
MATRIX=0
if [ "${1:-}" = --matrix ]; then MATRIX=1; shift; fi
BIN=${1:?usage: fleet.sh [--matrix] BINARY [PORT] [N] [Q]}
PORT_ARG=${2:-0}; N_ARG=${3:-10}; Q_ARG=${4:-1}
WARMUP=${WARMUP:-15}; MEASURE=${MEASURE:-30}; JOIN_TIMEOUT=${JOIN_TIMEOUT:-180}
MATRIX_NODES=${MATRIX_NODES:-"10 40 120"}; MATRIX_QUEUES=${MATRIX_QUEUES:-"1 100 300"}
PREFIX=fb
BIN=$(readlink -f "$BIN")
[ -x "$BIN" ] || { echo "fleet.sh: $BIN is not executable" >&2; exit 2; }

# ~4 Redis connections and ~15 descriptors per node; redis-server sizes maxclients from this.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

D=""; RPID=""; P=""; NODE_PIDS=()
log() { echo "[fleet $(date +%T)] $*" >&2; }

stop_nodes() {
  [ ${#NODE_PIDS[@]} -eq 0 ] && return
  kill -TERM "${NODE_PIDS[@]}" 2>/dev/null
  local t=0 alive
  while :; do
    alive=()
    for p in "${NODE_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    [ ${#alive[@]} -eq 0 ] && break
    if [ $t -ge 150 ]; then log "${#alive[@]} nodes still up after 15 s: KILL"; kill -KILL "${alive[@]}" 2>/dev/null; fi
    [ $t -ge 200 ] && break
    sleep 0.1; t=$((t + 1))
  done
  wait "${NODE_PIDS[@]}" 2>/dev/null
  NODE_PIDS=()
}

stop_redis() {
  [ -z "$RPID" ] && return
  redis-cli -p "$P" shutdown nosave >/dev/null 2>&1
  local t=0
  while kill -0 "$RPID" 2>/dev/null; do
    [ $t -eq 50 ] && kill -KILL "$RPID" 2>/dev/null
    sleep 0.1; t=$((t + 1))
  done
  wait "$RPID" 2>/dev/null
  RPID=""
  # the listening socket is gone with the process; wait until the kernel says so too
  t=0
  while [ -n "$(ss -Hltn "sport = :$P" 2>/dev/null)" ] && [ $t -lt 100 ]; do sleep 0.1; t=$((t + 1)); done
}

cleanup() {
  stop_nodes
  stop_redis
  if [ -n "$D" ] && [ -z "${KEEP:-}" ]; then rm -rf "$D"; fi
  D=""
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

members() { redis-cli -p "$P" hlen "$PREFIX:{cluster}:registry" 2>/dev/null || echo 0; }

run() {
  local N=$1 Q=$2
  # memory: ~25-30 MB RSS per idle node measured here; refuse when under 100 MB per node is free
  local avail_mb=$(( $(awk '/^MemAvailable:/{print $2}' /proc/meminfo) / 1024 ))
  if [ "$avail_mb" -lt $(( N * 100 + 500 )) ]; then
    log "N=$N needs ~$(( N * 100 + 500 )) MB free, $avail_mb MB available: skipped"
    echo "| $N | $Q | skipped: $avail_mb MB available |"
    return
  fi
  P=$PORT_ARG
  [ -z "$P" ] || [ "$P" = 0 ] && P=$(free_port)
  if [ -n "$(ss -Hltn "sport = :$P" 2>/dev/null)" ]; then
    log "port $P is in use"; echo "| $N | $Q | skipped: port $P in use |"; return
  fi
  D=$(mktemp -d -t fleet.XXXXXX)
  redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no --dir "$D" \
    --logfile "$D/redis.log" --maxclients 10000 &
  RPID=$!
  local t=0
  until redis-cli -p "$P" ping >/dev/null 2>&1; do
    sleep 0.1; t=$((t + 1))
    if [ $t -gt 100 ] || ! kill -0 "$RPID" 2>/dev/null; then log "redis-server did not start (see $D/redis.log)"; KEEP=1; exit 1; fi
  done
  {
    echo "redis:"
    echo "  url: redis://127.0.0.1:$P/0"
    echo "  key_prefix: $PREFIX"
    [ -n "${YAML_EXTRA:-}" ] && printf '%s\n' "$YAML_EXTRA"
  } > "$D/cluster.yaml"
  # Q queues: one `delayq schedule` per queue (the CLI loads into one queue per call), 4 at a time
  local t0=$SECONDS
  seq -f 'q%03g' 1 "$Q" | xargs -P 4 -I{} "$BIN" --config "$D/cluster.yaml" schedule {} idle --in 24h \
    > /dev/null 2> "$D/schedule.err" || { log "creating queues failed:"; cat "$D/schedule.err" >&2; exit 1; }
  local qn
  qn=$(redis-cli -p "$P" hlen "$PREFIX:{cluster}:queues")
  log "N=$N Q=$Q: redis on port $P, $qn queues created in $((SECONDS - t0)) s; starting $N nodes"
  t0=$SECONDS
  for i in $(seq 1 "$N"); do
    DELAYQ_NODE_NAME=n$i "$BIN" --config "$D/cluster.yaml" node --handler log > /dev/null 2> "$D/node$i.log" &
    NODE_PIDS+=($!)
  done
  echo "${NODE_PIDS[@]}" > "$D/pids"
  local joined=yes m=0 live
  while :; do
    m=$(members)
    [ "$m" -ge "$N" ] && break
    # a node that could not reach Redis or join in time exits: stop waiting for it
    live=0; for p in "${NODE_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && live=$((live + 1)); done
    if [ "$live" -lt "$N" ] && [ "$m" -ge "$live" ]; then joined=no; log "$((N - live)) node processes exited; $m members"; break; fi
    if [ $((SECONDS - t0)) -ge "$JOIN_TIMEOUT" ]; then joined=no; log "only $m of $N members after $JOIN_TIMEOUT s"; break; fi
    sleep 0.5
  done
  log "$m members after $((SECONDS - t0)) s"
  # a node whose join timed out exits (its registry entry can stay behind): say so
  local dead=0 f
  for i in "${!NODE_PIDS[@]}"; do
    if ! kill -0 "${NODE_PIDS[$i]}" 2>/dev/null; then
      dead=$((dead + 1)); f=$D/node$((i + 1)).log
    fi
  done
  [ $dead -gt 0 ] && log "$dead node processes exited already; e.g. $(grep -h '^error' "$f" | head -1)"
  # cross-check with the CLI (slow on big fleets with some builds: bounded, HLEN is the answer)
  local cli ts=$(date +%s%N)
  cli=$(timeout 20 "$BIN" --config "$D/cluster.yaml" nodes --json 2>/dev/null \
        | python3 -c 'import sys,json; print(len(json.load(sys.stdin)))' 2>/dev/null)
  log "delayq nodes --json: ${cli:-no answer} in $(( ($(date +%s%N) - ts) / 1000000 )) ms (registry HLEN $m)"
  log "warm-up ${WARMUP} s, then measuring ${MEASURE} s"
  sleep "$WARMUP"
  python3 - "$P" "$MEASURE" "$N" "$Q" "$joined" "$RPID" "$PREFIX" "${NODE_PIDS[@]}" <<'PY'
import os, subprocess, sys, time
P, T, N, Q, joined, rpid, prefix = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7]
pids = [int(x) for x in sys.argv[8:]]
tick = os.sysconf("SC_CLK_TCK")
def info():
    # one INFO call per sample (it counts as one command itself)
    out = subprocess.run(["redis-cli", "-p", P, "info", "stats", "cpu", "commandstats"],
                         capture_output=True, text=True).stdout
    kv, cmds = {}, {}
    for line in out.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[8:].split(":", 1)
            cmds[name] = int(rest.split("calls=")[1].split(",")[0])
        elif ":" in line:
            k, v = line.split(":", 1)
            kv[k] = v.strip()
    return {"cmds": int(kv["total_commands_processed"]), "out": int(kv["total_net_output_bytes"]),
            "cpu": float(kv["used_cpu_sys"]) + float(kv["used_cpu_user"]), "stats": cmds}
def proc_ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except OSError:
        return None
def rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
def machine_busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f) - f[3] - f[4]  # all but idle and iowait, in ticks
def nodes():
    return {p: proc_ticks(p) for p in pids}
def epoch():
    out = subprocess.run(["redis-cli", "-p", P, "get", prefix + ":{cluster}:epoch"],
                         capture_output=True, text=True).stdout.strip()
    return int(out) if out.isdigit() else 0
e0 = epoch()
a_t, a, a_n, a_m, a_r = time.time(), info(), nodes(), machine_busy(), proc_ticks(rpid)
rss_samples = []
end = a_t + T
while True:
    left = end - time.time()
    if left <= 0:
        break
    time.sleep(min(5.0, left))
    rss_samples.append([r for r in (rss_mb(p) for p in pids) if r is not None])
b_t, b, b_n, b_m, b_r = time.time(), info(), nodes(), machine_busy(), proc_ticks(rpid)
e1 = epoch()
dt = b_t - a_t
alive = [p for p in pids if a_n[p] is not None and b_n[p] is not None]
live = max(len(alive), 1)  # per-node figures are over the node processes alive all span
node_ticks = sum(b_n[p] - a_n[p] for p in alive)
node_cpu = node_ticks / tick / dt * 100
redis_cpu = (b["cpu"] - a["cpu"]) / dt * 100
others = ((b_m - a_m) - node_ticks - ((b_r or 0) - (a_r or 0))) / tick / dt * 100
cps = (b["cmds"] - a["cmds"]) / dt
outk = (b["out"] - a["out"]) / dt / 1024
members = subprocess.run(["redis-cli", "-p", P, "hlen", prefix + ":{cluster}:registry"],
                         capture_output=True, text=True).stdout.strip()
rates = {k: (v - a["stats"].get(k, 0)) / dt for k, v in b["stats"].items()}
top = sorted(rates.items(), key=lambda kv: -kv[1])[:3]
last = rss_samples[-1] if rss_samples else []
rss_mean = sum(last) / len(last) if last else float("nan")
rss_max = max((max(s) for s in rss_samples if s), default=float("nan"))
flags = []
if joined != "yes": flags.append("not all joined")
if len(alive) < N: flags.append(f"{N - len(alive)} node processes exited")
print("| %d | %d | %s%s | %d | %s | %s | %.1f | %s | %s | %.2f | %.1f | %.1f (%.1f) | %s | %.0f |" % (
    N, Q, members, (" (" + ", ".join(flags) + ")") if flags else "", e1 - e0,
    f"{cps:,.0f}", f"{outk:,.1f}", redis_cpu, f"{cps / live:,.1f}", f"{outk * 1024 / live:,.0f}",
    node_cpu / live, node_cpu, rss_mean, rss_max,
    ", ".join(f"{k} {v:,.0f}" for k, v in top), others), flush=True)
PY
  log "stopping $N nodes and redis"
  stop_nodes
  stop_redis
  [ -z "${KEEP:-}" ] && rm -rf "$D" || log "kept $D"
  D=""
}

echo "| N | Q | members at end | epoch bumps in span | Redis cmd/s | Redis out KiB/s | Redis CPU % | cmd/s per node | out B/s per node | CPU % per node (mean) | nodes CPU % (all) | RSS MB mean (max) | top 3 commands, calls/s | others' CPU % |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
if [ $MATRIX = 1 ]; then
  for N in $MATRIX_NODES; do
    for Q in $MATRIX_QUEUES; do
      run "$N" "$Q"
    done
  done
else
  run "$N_ARG" "$Q_ARG"
fi
