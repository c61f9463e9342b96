#!/bin/bash
# Part of BENCHMARKS.md (issue 16): what 3 `delayq node` processes cost Redis while Q queues of
# 64 partitions sit idle, and whether tasks scheduled into them then still fire on time.
# 1. one private redis-server, Q queues each created by one task due in 24 h;
# 2. 3 nodes (`--handler log`), WARMUP s for the partitions to go idle, then MEASURE s of
#    Redis INFO (commands/s, output bytes/s, CPU) and the nodes' /proc CPU;
# 3. a producer process (`delayq schedule --from`) schedules TASKS tasks into random queues,
#    due 3-23 s ahead (announced by wake-ups) and 60-70 s ahead (found by the idle looks,
#    planned no later than the due minus the window); lateness p50/p99/max from the nodes'
#    log lines (fired_ms - due_ms, both on the cluster clock).
# usage: idle_precision.sh BINARY [Q=300]   env: WARMUP=40 MEASURE=30 TASKS=400 YAML_EXTRA
set -u
BIN=$(readlink -f "${1:?usage: idle_precision.sh BINARY [Q]}"); Q=${2:-300}
WARMUP=${WARMUP:-40}; MEASURE=${MEASURE:-30}; TASKS=${TASKS:-400}
D=$(mktemp -d); PIDS=()
P=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() {
  [ ${#PIDS[@]} -gt 0 ] && kill "${PIDS[@]}" 2>/dev/null && wait "${PIDS[@]}" 2>/dev/null
  redis-cli -p "$P" shutdown nosave >/dev/null 2>&1; rm -rf "$D"
}
trap cleanup EXIT INT TERM
redis-server --port "$P" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir "$D" --logfile "$D/redis.log"
until redis-cli -p "$P" ping >/dev/null 2>&1; do sleep 0.1; done
printf "redis:\n  url: redis://127.0.0.1:%s/0\n  key_prefix: ip\n%s\n" "$P" "${YAML_EXTRA:-}" > "$D/cluster.yaml"
echo "[idle] creating $Q queues" >&2
seq 0 $((Q - 1)) | xargs -P 4 -I{} "$BIN" --config "$D/cluster.yaml" schedule "q{}" idle --in 24h >/dev/null
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i "$BIN" --config "$D/cluster.yaml" node --handler log > "$D/out$i.jsonl" 2> "$D/err$i.log" &
  PIDS+=($!)
done
echo "[idle] 3 nodes started; warm-up ${WARMUP}s" >&2
sleep "$WARMUP"
python3 - "$D" "$P" "$MEASURE" "${PIDS[@]}" <<'PY'
import sys, time, subprocess
D, P, span, pids = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
tick = float(subprocess.run(["getconf", "CLK_TCK"], capture_output=True, text=True).stdout)
def info():
    out = subprocess.run(["redis-cli", "-p", P, "info", "all"], capture_output=True, text=True).stdout
    kv = dict(l.split(":", 1) for l in out.splitlines() if ":" in l and not l.startswith("#"))
    return (int(kv["total_commands_processed"]), int(kv["total_net_output_bytes"]),
            float(kv["used_cpu_sys"]) + float(kv["used_cpu_user"]))
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
a, ca, t0 = info(), [cpu(p) for p in pids], time.time()
time.sleep(span)
b, cb, t1 = info(), [cpu(p) for p in pids], time.time()
dt = t1 - t0
node = [100 * (y - x) / dt for x, y in zip(ca, cb)]
print(f"idle: {(b[0]-a[0])/dt:,.0f} Redis commands/s, {(b[1]-a[1])/dt/1024:,.1f} KiB/s out, "
      f"Redis CPU {100*(b[2]-a[2])/dt:.1f} %, node CPU % " + " / ".join(f"{x:.1f}" for x in node))
PY
python3 - "$D" "$BIN" "$Q" "$TASKS" <<'PY'
import sys, time, subprocess, json, glob, random
D, BIN, Q, TASKS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
now = int(time.time() * 1000)
by_queue = {}
for k in range(TASKS):
    ahead = random.randint(3000, 23000) if k % 4 else random.randint(60000, 70000)
    by_queue.setdefault(f"q{random.randrange(Q)}", []).append({"id": f"t{k}", "due_ms": now + ahead})
for queue, items in by_queue.items():
    path = f"{D}/{queue}.jsonl"
    open(path, "w").write("\n".join(json.dumps(x) for x in items) + "\n")
    subprocess.run([BIN, "--config", D + "/cluster.yaml", "schedule", queue, "--from", path], capture_output=True)
print(f"[idle] {TASKS} tasks in {len(by_queue)} queues scheduled in {time.time()*1000-now:.0f} ms", file=sys.stderr)
time.sleep(75 - (time.time() * 1000 - now) / 1000)
late, seen = [], set()
for f in glob.glob(D + "/out*.jsonl"):
    for line in open(f):
        try:
            x = json.loads(line)
        except ValueError:
            continue
        if x.get("id", "").startswith("t"):
            late.append(x["fired_ms"] - x["due_ms"]); seen.add(x["id"])
late.sort(); n = len(late)
if n == 0:
    print("no task fired"); sys.exit(1)
print(f"fired {len(seen)}/{TASKS} (runs {n}), lateness ms p50 {late[n//2]} p99 {late[min(n-1, int(n*0.99))]} "
      f"max {late[-1]} min {late[0]}")
PY
