#!/bin/bash
# Part of BENCHMARKS.md (issue 14): the lateness of 50 ordinary tasks per second for 20 s
# through 3 `delayq node` processes (random offsets in the second; ALIGNED=1: all at the
# same instant), to compare with bench/recurring_nodes.sh. usage: BINARY PORT
BIN=$1; P=$2
D=$(mktemp -d)
redis-server --port $P --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir $D --logfile $D/redis.log
sleep 0.3
printf "redis:\n  url: redis://127.0.0.1:$P/0\n  key_prefix: rb\n" > $D/cluster.yaml
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i $BIN --config $D/cluster.yaml node --queue ticks > $D/out$i.jsonl 2>$D/err$i.log &
  echo $! >> $D/pids
done
sleep 3
python3 - "$D" "$BIN" <<'PY'
import sys, time, subprocess, json, glob, random, os
D, BIN = sys.argv[1], sys.argv[2]
now = int(time.time()*1000)
lines = []
for s in range(50):
    off = 0 if os.environ.get("ALIGNED") else random.randint(0, 999)
    for k in range(20):
        lines.append(json.dumps({"id": f"p{s}-{k}", "due_ms": now + 3000 + off + k*1000}))
open(D+"/t.jsonl","w").write("\n".join(lines)+"\n")
subprocess.run([BIN, "--config", D+"/cluster.yaml", "schedule", "ticks", "--from", D+"/t.jsonl"], capture_output=True)
time.sleep(25)
late = []
for f in glob.glob(D+"/out*.jsonl"):
    for line in open(f):
        x = json.loads(line); late.append(x["fired_ms"]-x["due_ms"])
late.sort(); n=len(late)
print(n, "p50", late[n//2], "p99", late[int(n*0.99)], "max", late[-1])
PY
kill $(cat $D/pids); sleep 1; redis-cli -p $P shutdown nosave >/dev/null 2>&1; rm -rf $D
