#!/bin/bash
# Part of BENCHMARKS.md (issue 18, "before and after"). Runs bench/burst_nodes.sh for two (or
# more) binaries in turn, ROUNDS times (default 3), so that a shared machine's noise falls on
# all of them alike, and prints one line per run: the binary, the load average, and the
# burst's tasks/s, Redis and node CPU per fired task and bytes per pending task.
# usage: alternate_bursts.sh PORT BINARY_A BINARY_B [...]
# Environment: ROUNDS, N (tasks, default 100000), PAYLOAD_BYTES (default 50).
P=$1; shift
HERE=$(dirname "$0")
for round in $(seq 1 "${ROUNDS:-3}"); do
  for bin in "$@"; do
    out=$(PAYLOAD_BYTES=${PAYLOAD_BYTES:-50} bash "$HERE/burst_nodes.sh" "$bin" "$P" "${N:-100000}" 2>/dev/null | tail -1)
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 - "$out" "$bin" "$load" "$round" <<'PY'
import json, sys
run, bin, load, round_ = sys.argv[1:5]
fields = ["deliveries", "tasks_per_s", "redis_cpu_us_per_task", "node_cpu_us_per_task", "bytes_per_task"]
try:
    figures = json.loads(run)
except ValueError:
    figures = {"error": run}
print(json.dumps({"round": int(round_), "binary": bin, "load": float(load),
                  **{k: figures.get(k) for k in fields + ["error"] if k in figures}}))
PY
  done
done
