#!/bin/bash
# Part of BENCHMARKS.md "Fires per core (issue 18), node side". Needs redis-server, redis-cli, python3 (and perf for a profile).
# Burst of N tasks due at once through 3 `delayq node --handler log` processes on one private redis-server;
# prints tasks/s, Redis CPU us per fired task (INFO cpu) and the node processes' CPU us per fired task
# (utime+stime from /proc over the fire phase), and perf-records the nodes into OUT unless OUT is "none".
# usage: burst_profile.sh BINARY PORT [N] [OUT]
BIN=$1; P=$2; N=${3:-100000}; OUT=${4:-/tmp/nodes.perf}
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
for i in 1 2 3; do
  DELAYQ_NODE_NAME=n$i $BIN --config $D/cluster.yaml node --queue burst > $D/out$i.jsonl 2>$D/err$i.log &
  echo $! >> $D/pids
done
sleep 2
now_ms=$(python3 -c "import time; print(int(time.time()*1000))")
due=$((now_ms + 12000))
python3 -c "
for i in range($N): print('{\"id\":\"t-%07d\",\"due_ms\":%d}' % (i, $due))" > $D/tasks.jsonl
$BIN --config $D/cluster.yaml schedule burst --from $D/tasks.jsonl > $D/load.json 2>$D/load.err
pids=$(paste -sd, $D/pids)
python3 - "$D" "$P" "$N" "$due" "$pids" "$OUT" <<'PY'
import sys, time, subprocess, json, glob, os
D, P, N, due, pids, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
def cpu():
    o = subprocess.run(["redis-cli","-p",P,"info","cpu"],capture_output=True,text=True).stdout
    return sum(float(l.split(":")[1]) for l in o.splitlines() if l.startswith(("used_cpu_sys:","used_cpu_user:")))
tck = os.sysconf('SC_CLK_TCK')
def ncpu():
    s=0
    for p in pids.split(','):
        f=open(f"/proc/{p}/stat").read().rsplit(')',1)[1].split()
        s+=int(f[11])+int(f[12])
    return s/tck
def count():
    n=0
    for f in glob.glob(D+"/out*.jsonl"):
        with open(f,'rb') as fh: n += fh.read().count(b"\n")
    return n
while time.time()*1000 < due - 300: time.sleep(0.01)
perf = None
if out != "none":
    perf = subprocess.Popen(["perf","record","-F","1999","-g","-o",out,"-p",pids],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
while time.time()*1000 < due - 50: time.sleep(0.01)
c0 = cpu(); n0 = ncpu()
t_end = time.time()+120
while count() < N and time.time() < t_end: time.sleep(0.05)
c1 = cpu(); n1 = ncpu()
if perf: perf.send_signal(2); perf.wait()
fired=[]
for f in glob.glob(D+"/out*.jsonl"):
    for line in open(f):
        try: fired.append(json.loads(line)["fired_ms"])
        except Exception: pass
last=max(fired)
print(json.dumps({"deliveries":len(fired),"tasks_per_s":round(N/((last-due)/1000)),"drain_ms":last-due,"redis_cpu_us_per_task":round((c1-c0)*1e6/N,2),"node_cpu_us_per_task":round((n1-n0)*1e6/N,2)}))
PY
redis-cli -p $P info commandstats | grep -E "evalsha|fcall|cmdstat_(zadd|hset|publish)" | head
kill $(cat $D/pids) 2>/dev/null; sleep 1
redis-cli -p $P shutdown nosave >/dev/null 2>&1
rm -rf $D
