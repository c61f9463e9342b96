#!/bin/bash
# Part of BENCHMARKS.md (issues 10 and 18). Needs redis-server, redis-cli and python3.
# Burst of N tasks due at one instant through 3 `delayq node --handler log` processes on one
# redis-server. Prints one JSON line:
#   tasks_per_s            N / (last fired - due)
#   redis_cpu_us_per_task  INFO cpu (used_cpu_sys + used_cpu_user) delta over the fire phase / N
#                          (redis_sys_us_per_task: the kernel's share, used_cpu_sys)
#   node_cpu_us_per_task   the node processes' utime + stime (/proc/<pid>/stat) delta, summed / N
#   bytes_per_task         used_memory delta over the load (settled) / N
#   commands               INFO commandstats delta over the fire phase: per command, calls per
#                          1,000 tasks and Redis µs per task (FCALL / EVALSHA include the
#                          commands their scripts ran, which are listed as well)
# usage: burst_nodes.sh BINARY PORT [N]
# Environment: PAYLOAD_BYTES (default 50: every task gets that many bytes of payload; 0: none,
# as issue 10 measured), KEEP=1 keeps the temp dir (redis log, node logs), PERF=FILE records
# redis-server with `perf record -g` over the fire phase into FILE, NODE_PERF=FILE the three
# node processes (`perf record -F $NODE_PERF_FREQ -g -p <pids>`, 999 Hz unless NODE_PERF_FREQ
# says otherwise, call chains from DWARF with NODE_PERF_CALLS=dwarf; then `perf report -i FILE
# --no-children`), QUEUE_DEFAULTS the queue settings as the inside of a YAML flow mapping
# (`QUEUE_DEFAULTS='concurrency: 512'`; default empty: the documented defaults of cluster.yaml,
# concurrency 64 per node; the sections of BENCHMARKS.md before issue 26 were measured with
# `concurrency: 512`, which this script then always set).
# Flow keys (issue 27): QUEUE_YAML the inside of a YAML flow mapping for the queue `burst`
# itself (`QUEUE_YAML='flow_keys: true, per_key_concurrency: 1'`), KEYED=1 gives every task a
# flow key of its own (ids `t:{k0000042}:0` instead of `t-0000042`), HOT=N gives the first N
# tasks one key (`t:{hot}:0000042`); then the line also holds others_drain_ms (the last fire of
# the tasks without the hot key - due) and hot_fired.
BIN=$1; P=$2; N=${3:-100000}; PAYLOAD_BYTES=${PAYLOAD_BYTES:-50}; QUEUE_DEFAULTS=${QUEUE_DEFAULTS:-}
QUEUE_YAML=${QUEUE_YAML:-}; KEYED=${KEYED:-}; HOT=${HOT:-0}
D=$(mktemp -d)
redis-server --port $P --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir $D --logfile $D/redis.log
sleep 0.3
cat > $D/cluster.yaml <<YAML
redis:
  url: redis://127.0.0.1:$P/0
  key_prefix: bn
YAML
if [ -n "$QUEUE_DEFAULTS" ]; then
  echo "queue_defaults: { $QUEUE_DEFAULTS }" >> $D/cluster.yaml
fi
if [ -n "$QUEUE_YAML" ]; then
  printf 'queues:\n  burst: { %s }\n' "$QUEUE_YAML" >> $D/cluster.yaml
fi
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i $BIN --config $D/cluster.yaml node --queue burst > $D/out$i.jsonl 2>$D/err$i.log &
  echo $! >> $D/pids
done
sleep 2
python3 - "$D" "$P" "$N" "$BIN" "$PAYLOAD_BYTES" "$KEYED" "$HOT" <<'PY'
import sys, time, subprocess, json, glob
D, P, N, BIN, PB = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
KEYED, HOT = sys.argv[6] == "1", int(sys.argv[7])
def task_id(i):
    if i < HOT:
        return "t:{hot}:%07d" % i
    if KEYED:
        return "t:{k%07d}:0" % i
    return "t-%07d" % i
def info(section):
    out = subprocess.run(["redis-cli", "-p", P, "info", section], capture_output=True, text=True).stdout
    return [l.strip() for l in out.splitlines() if ":" in l]
def cpu():
    return sum(float(l.split(":")[1]) for l in info("cpu") if l.startswith(("used_cpu_sys:", "used_cpu_user:")))
def cpu_sys():
    return sum(float(l.split(":")[1]) for l in info("cpu") if l.startswith("used_cpu_sys:"))
def used_memory():
    return int(next(l.split(":")[1] for l in info("memory") if l.startswith("used_memory:")))
def settled_memory():
    last = used_memory()
    for _ in range(50):
        time.sleep(0.1)
        now = used_memory()
        if now == last:
            return now
        last = now
    return last
def commandstats():
    stats = {}
    for l in info("commandstats"):
        name, rest = l.split(":", 1)
        fields = dict(kv.split("=") for kv in rest.split(","))
        stats[name.replace("cmdstat_", "")] = (int(fields["calls"]), int(fields["usec"]))
    return stats
pids = [int(x) for x in open(D + "/pids").read().split()]
tick = __import__("os").sysconf("SC_CLK_TCK")
def node_cpu():
    total = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick
payload = "p" * PB
due = int(time.time() * 1000) + 12000
with open(D + "/tasks.jsonl", "w") as f:
    for i in range(N):
        if PB:
            f.write('{"id":"%s","due_ms":%d,"payload":"%s"}\n' % (task_id(i), due, payload))
        else:
            f.write('{"id":"%s","due_ms":%d}\n' % (task_id(i), due))
m0 = settled_memory()
subprocess.run([BIN, "--config", D + "/cluster.yaml", "schedule", "burst", "--from", D + "/tasks.jsonl"],
               stdout=open(D + "/load.json", "w"), stderr=open(D + "/load.err", "w"))
m1 = settled_memory()
if time.time() * 1000 > due - 500:
    print(json.dumps({"error": "the load took too long: the due instant passed"}))
while time.time() * 1000 < due - 50:
    time.sleep(0.01)
perf = None
if __import__("os").environ.get("PERF"):
    # perf record of redis-server over the fire phase (PERF=FILE).
    rpid = subprocess.run(["redis-cli", "-p", P, "info", "server"], capture_output=True, text=True).stdout
    rpid = next(l.split(":")[1].strip() for l in rpid.splitlines() if l.startswith("process_id:"))
    perf = subprocess.Popen(["perf", "record", "-F", "1999", "-g", "-p", rpid, "-o", __import__("os").environ["PERF"]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
node_perf = None
if __import__("os").environ.get("NODE_PERF"):
    # perf record of the three nodes over the fire phase (NODE_PERF=FILE).
    freq = __import__("os").environ.get("NODE_PERF_FREQ", "999")
    # NODE_PERF_CALLS=dwarf: call chains from DWARF (the release build has no frame pointers).
    calls = ["--call-graph", "dwarf,16384"] if __import__("os").environ.get("NODE_PERF_CALLS") == "dwarf" else ["-g"]
    node_perf = subprocess.Popen(["perf", "record", "-F", freq] + calls + ["-p", ",".join(map(str, pids)),
                                  "-o", __import__("os").environ["NODE_PERF"]],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
c0, n0, s0, y0 = cpu(), node_cpu(), commandstats(), cpu_sys()
def count():
    n = 0
    for f in glob.glob(D + "/out*.jsonl"):
        with open(f, 'rb') as fh:
            n += fh.read().count(b"\n")
    return n
t_end = time.time() + 120
while count() < N and time.time() < t_end:
    time.sleep(0.05)
c1, n1, s1, y1 = cpu(), node_cpu(), commandstats(), cpu_sys()
for recording in (perf, node_perf):
    if recording:
        recording.send_signal(2)
        recording.wait()
fired, others = [], []
hot_fired = 0
for f in glob.glob(D + "/out*.jsonl"):
    for line in open(f):
        try:
            entry = json.loads(line)
        except Exception:
            continue
        fired.append(entry["fired_ms"])
        if entry.get("id", "").startswith("t:{hot}:"):
            hot_fired += 1
        else:
            others.append(entry["fired_ms"])
last = max(fired)
commands = {}
for name, (calls, usec) in s1.items():
    calls0, usec0 = s0.get(name, (0, 0))
    if calls - calls0 > 0:
        commands[name] = {"calls_per_1k_tasks": round((calls - calls0) * 1000 / N, 2),
                          "us_per_task": round((usec - usec0) / N, 2),
                          "us_per_call": round((usec - usec0) / (calls - calls0), 2)}
commands = dict(sorted(commands.items(), key=lambda kv: -kv[1]["us_per_task"]))
print(json.dumps({"deliveries": len(fired), "tasks_per_s": round(N / ((last - due) / 1000)),
                  "drain_ms": last - due,
                  "redis_cpu_us_per_task": round((c1 - c0) * 1e6 / N, 2),
                  "redis_sys_us_per_task": round((y1 - y0) * 1e6 / N, 2),
                  "node_cpu_us_per_task": round((n1 - n0) * 1e6 / N, 2),
                  "bytes_per_task": round((m1 - m0) / N, 1),
                  "payload_bytes": PB,
                  "keyed": KEYED, "hot": HOT, "hot_fired": hot_fired,
                  "others_drain_ms": (max(others) - due) if others else None,
                  "commands": commands}))
PY
kill $(cat $D/pids) 2>/dev/null; sleep 1
redis-cli -p $P shutdown nosave >/dev/null 2>&1
if [ -n "$KEEP" ]; then echo "kept $D" >&2; else rm -rf $D; fi
