#!/bin/bash
# Part of BENCHMARKS.md (issue 14). Needs redis-server, redis-cli and python3.
# Lateness of recurring ticks and their cost: S schedules (`every: 1s`, declared in
# cluster.yaml by every node) on 3 `delayq node --handler log` processes and one redis-server,
# for T seconds. Prints the lateness (fired_ms - tick time, cluster clock) p50/p99/max over
# every tick fired after the warm-up, duplicates, the Redis CPU µs and commands per tick
# (INFO cpu / commandstats deltas over the measured span, claims and acks included) and the
# nodes' CPU µs per tick (/proc/<pid>/stat utime+stime). BENCH_COMMANDS=1 lists each Redis
# command's calls and µs over the span on stderr (commands run by scripts count too).
# MODE=spread (default): `every: 1s` with start_at offsets spread over the second, as
# schedules created at different moments are; MODE=aligned: `cron: "* * * * * *"`, every
# schedule's tick at the same instant (a burst of S fires each second).
# usage: recurring_nodes.sh BINARY PORT [SCHEDULES] [SECONDS]
BIN=$1; P=$2; S=${3:-50}; T=${4:-30}; MODE=${MODE:-spread}
D=$(mktemp -d)
redis-server --port $P --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir $D --logfile $D/redis.log
sleep 0.3
{
  echo "redis:"
  echo "  url: redis://127.0.0.1:$P/0"
  echo "  key_prefix: rb"
  echo "recurring:"
  base=$(( $(date +%s) * 1000 + 3000 ))
  for i in $(seq 1 $S); do
    if [ "$MODE" = aligned ]; then
      printf "  s%03d:\n    queue: ticks\n    cron: \"* * * * * *\"\n" $i
    else
      printf "  s%03d:\n    queue: ticks\n    every: 1s\n    start_at: %d\n" $i $(( base + i * 1000 / S ))
    fi
  done
} > $D/cluster.yaml
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i $BIN --config $D/cluster.yaml node --queue ticks > $D/out$i.jsonl 2>$D/err$i.log &
  echo $! >> $D/pids
done
python3 - "$D" "$P" "$T" <<'PY'
import sys, time, subprocess, json, glob, os
D, P, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
pids = [int(x) for x in open(D + "/pids").read().split()]
tick = os.sysconf("SC_CLK_TCK")
def redis(*args):
    return subprocess.run(["redis-cli", "-p", P, *args], capture_output=True, text=True).stdout
def cpu():
    return sum(float(l.split(":")[1]) for l in redis("info", "cpu").splitlines()
               if l.startswith(("used_cpu_sys:", "used_cpu_user:")))
def stats():
    out = {}
    for line in redis("info", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name = line.split(":")[0][8:]
            calls = int(line.split("calls=")[1].split(",")[0])
            usec = int(line.split("usec=")[1].split(",")[0])
            out[name] = (calls, usec)
    return out
def calls():
    return sum(c for c, _ in stats().values())
def node_cpu():
    total = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick
def fires():
    out = []
    for f in glob.glob(D + "/out*.jsonl"):
        for line in open(f):
            try:
                out.append(json.loads(line))
            except Exception:
                pass
    return out
time.sleep(5)  # warm-up: nodes join, schedules declared, the first ticks fire
start_ms = int(time.time() * 1000)
c0, k0, n0, s0 = cpu(), calls(), node_cpu(), stats()
time.sleep(T)
c1, k1, n1, s1 = cpu(), calls(), node_cpu(), stats()
if os.environ.get("BENCH_COMMANDS"):
    for name in sorted(s1, key=lambda k: -(s1[k][1] - s0.get(k, (0, 0))[1])):
        calls_, usec = s1[name][0] - s0.get(name, (0, 0))[0], s1[name][1] - s0.get(name, (0, 0))[1]
        if calls_:
            print(f"  {name}: {calls_} calls, {usec} us", file=sys.stderr)
end_ms = int(time.time() * 1000)
ticks = [f for f in fires() if start_ms <= f["due_ms"] < end_ms]
late = sorted(f["fired_ms"] - f["due_ms"] for f in ticks)
ids = [f["id"] for f in ticks]
n = len(late)
pct = lambda q: late[min(n - 1, int(q * n))] if n else None
print(json.dumps({
    "schedules": len(set(i.split("@")[0] for i in ids)),
    "ticks": n, "duplicates": n - len(set(ids)), "early": sum(1 for x in late if x < 0),
    "lateness_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": late[-1] if n else None},
    "redis_cpu_us_per_tick": round((c1 - c0) * 1e6 / max(n, 1), 1),
    "redis_commands_per_tick": round((k1 - k0) / max(n, 1), 2),
    "nodes_cpu_us_per_tick": round((n1 - n0) * 1e6 / max(n, 1), 1),
}))
PY
kill $(cat $D/pids) 2>/dev/null; sleep 1
redis-cli -p $P shutdown nosave >/dev/null 2>&1
rm -rf $D
