#!/bin/bash
# Part of BENCHMARKS.md (issue 18, precision under a stream of schedules). Needs redis-cli and
# python3, and a redis-server already listening on 127.0.0.1:PORT.
# Runs `BIN bench --scenario streaming --rate RATE --duration 10s --json` and, over seconds
# 6..10 of the stream (fires at the full rate beside the schedules), reads /proc/<pid>/task/
# <tid>/schedstat of the redis-server main thread and of every bench thread: time on a CPU
# and time runnable but waiting for one (run queue). Prints one JSON line: the scenario's
# lateness p50/p99 and PING p50/p99 and, per thread kind, on_cpu_ms and runqueue_wait_ms over
# those 4 s.
# usage: streaming_schedstat.sh BIN PORT [RATE]
BIN=$1; P=$2; RATE=${3:-10000}
OUT=$(mktemp)
RP=$(redis-cli -p "$P" info server | awk -F: '/^process_id:/{print $2}' | tr -d '\r')
snap() {
  echo "redis $(cat /proc/$RP/task/$RP/schedstat)"
  # A thread may end between the listing and the read: skip it.
  for t in /proc/$1/task/*; do
    line="$(cat $t/comm 2>/dev/null | tr ' ' _) $(cat $t/schedstat 2>/dev/null)"
    [ "$(echo $line | wc -w)" = 4 ] && echo "$line"
  done
}
"$BIN" bench --redis "redis://127.0.0.1:$P/0" --scenario streaming --rate "$RATE" --duration 10s --json > "$OUT" 2>/dev/null &
B=$!
sleep 6; A=$(snap $B); sleep 4; Z=$(snap $B)
wait $B
python3 - "$OUT" "$A" "$Z" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))["streaming"]
def parse(text):
    sums = {}
    for line in text.splitlines():
        name, on_cpu, wait, _ = line.split()
        s = sums.setdefault(name, [0, 0])
        s[0] += int(on_cpu); s[1] += int(wait)
    return sums
a, z = parse(sys.argv[2]), parse(sys.argv[3])
threads = {name: {"on_cpu_ms": round((z[name][0] - a[name][0]) / 1e6),
                  "runqueue_wait_ms": round((z[name][1] - a[name][1]) / 1e6)}
           for name in z if name in a}
print(json.dumps({"rate": report["rate"], "lateness_p50_ms": report["lateness_ms"]["p50"],
                  "lateness_p99_ms": report["lateness_ms"]["p99"],
                  "ping_p50_us": (report["ping_us"] or {}).get("p50"),
                  "ping_p99_us": (report["ping_us"] or {}).get("p99"),
                  "machine": report["machine"], "over_4_s": threads}))
PY
rm -f "$OUT"
