#!/bin/bash
# Part of BENCHMARKS.md (issue 10). Needs redis-server, redis-cli and python3.
# Burst of N tasks due at one instant through 3 `delayq node --handler log` processes on one
# redis-server; prints tasks/s (N / (last fired - due)) and Redis CPU µs per fired task in the
# fire phase (INFO cpu, sampled at the due instant and when the last task fired).
# usage: run.sh BINARY PORT [N]
BIN=$1; P=$2; N=${3:-100000}
D=$(mktemp -d)
redis-server --port $P --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir $D --logfile $D/redis.log
sleep 0.3
cat > $D/cluster.yaml <<YAML
redis:
  url: redis://127.0.0.1:$P/0
  key_prefix: bn
queue_defaults:
  concurrency: 512
YAML
cpu() { redis-cli -p $P info cpu | awk -F: '/used_cpu_(sys|user):/{s+=$2} END{printf "%.4f", s}'; }
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i $BIN --config $D/cluster.yaml node --queue burst > $D/out$i.jsonl 2>$D/err$i.log &
  echo $! >> $D/pids
done
sleep 2
now_ms=$(python3 -c "import time; print(int(time.time()*1000))")
due=$((now_ms + 12000))
python3 -c "
import sys
for i in range($N): print('{\"id\":\"t-%07d\",\"due_ms\":%d}' % (i, $due))" > $D/tasks.jsonl
$BIN --config $D/cluster.yaml schedule burst --from $D/tasks.jsonl > $D/load.json 2>$D/load.err
python3 - "$D" "$P" "$N" "$due" <<'PY'
import sys, time, subprocess, json, glob
D, P, N, due = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def cpu():
    out = subprocess.run(["redis-cli","-p",P,"info","cpu"],capture_output=True,text=True).stdout
    return sum(float(l.split(":")[1]) for l in out.splitlines() if l.startswith(("used_cpu_sys:","used_cpu_user:")))
while time.time()*1000 < due - 50: time.sleep(0.01)
c0 = cpu()
def count():
    n=0
    for f in glob.glob(D+"/out*.jsonl"):
        with open(f,'rb') as fh: n += fh.read().count(b"\n")
    return n
t_end = time.time()+120
while count() < N and time.time() < t_end: time.sleep(0.05)
c1 = cpu()
fired=[]
for f in glob.glob(D+"/out*.jsonl"):
    for line in open(f):
        try: fired.append(json.loads(line)["fired_ms"])
        except Exception: pass
last=max(fired)
ids=len(fired)
print(json.dumps({"deliveries":ids,"tasks_per_s":round(N/((last-due)/1000)),"drain_ms":last-due,"redis_cpu_us_per_task":round((c1-c0)*1e6/N,2)}))
PY
kill $(cat $D/pids) 2>/dev/null; sleep 1
redis-cli -p $P shutdown nosave >/dev/null 2>&1
rm -rf $D
