#!/bin/bash
# Part of BENCHMARKS.md, "Trace context cost (issue 26)". Needs git, cargo, redis-server,
# redis-cli and python3.
#
# What trace context costs a burst: builds (release, --locked) the `delayq` binary of BEFORE
# and of AFTER from `git archive` of each rev, into BIN_DIR/<short rev>/delayq (a binary that
# is there already is used as it is), then runs bench/burst_nodes.sh (a burst of N tasks due at
# one instant through 3 node processes on one private redis-server) for three variants, in turn
# each round (even rounds in reverse order) so that the noise of a shared machine falls on all
# of them alike:
#   before      BEFORE's binary
#   after       AFTER's binary, no OTEL_* variable (nothing exported)
#   after_otel  AFTER's binary with OTEL_EXPORTER_OTLP_ENDPOINT pointing at bench/otlp_sink.py
#               (answers 200 to /v1/traces and counts the bytes)
# each once with the documented queue defaults (concurrency 64 per node) and once with
# QUEUE_DEFAULTS='concurrency: 512'. Every run is one JSON line in BIN_DIR/trace_cost-<date>.jsonl;
# at the end, a table of the medians (drain rate, node and Redis CPU per task, OTLP bytes per
# task) with the ratio of each variant to `before`.
#
# usage: bench/trace_cost.sh [BEFORE [AFTER]]
#   BEFORE defaults to the parent of the commit that first added opentelemetry to Cargo.toml
#   (the fire side of trace context, bb100a8; the schedule side followed in a7058bc); AFTER to
#   HEAD (committed work only: the build is of `git archive`).
# Environment: BIN_DIR (default target/trace-cost of this checkout; keep it outside the
# checkout to share builds between checkouts), ROUNDS (default 3), N (default 100000),
# PAYLOAD_BYTES (default 50), PORT (redis, default 6479), SINK_PORT (default 4319),
# CONCURRENCIES (default "default 512"), VARIANTS (default "before after after_otel").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
here="$root/bench"
bin_dir=${BIN_DIR:-$root/target/trace-cost}
rounds=${ROUNDS:-3}
tasks=${N:-100000}
port=${PORT:-6479}
sink_port=${SINK_PORT:-4319}
concurrencies=${CONCURRENCIES:-default 512}
variants=${VARIANTS:-before after after_otel}

first_otel=$(git -C "$root" log --format=%H -S opentelemetry -- Cargo.toml | tail -1)
before=$(git -C "$root" rev-parse --short "${1:-$first_otel^}")
after=$(git -C "$root" rev-parse --short "${2:-HEAD}")
mkdir -p "$bin_dir"
bin_dir=$(cd "$bin_dir" && pwd)

# The release binary of a rev, built once into BIN_DIR/<rev>/delayq; the builds share one
# target dir, so the dependencies both revs have in common are compiled once.
build() {
  local rev=$1 src="$bin_dir/src-$1"
  if [[ -x "$bin_dir/$rev/delayq" ]]; then
    echo "$bin_dir/$rev/delayq"
    return
  fi
  rm -rf "$src" && mkdir -p "$src" "$bin_dir/$rev"
  git -C "$root" archive "$rev" | tar -x -C "$src"
  (cd "$src" && CARGO_TARGET_DIR="$bin_dir/target" cargo build --release --locked -p delayq --bin delayq >&2)
  cp "$bin_dir/target/release/delayq" "$bin_dir/$rev/delayq"
  git -C "$root" log -1 --format='%H %s' "$rev" > "$bin_dir/$rev/REV"
  echo "$bin_dir/$rev/delayq"
}
before_bin=$(build "$before")
after_bin=$(build "$after")

python3 "$here/otlp_sink.py" "$sink_port" &
sink_pid=$!
trap 'kill $sink_pid 2>/dev/null || true' EXIT
sleep 0.5
sink_stats() { python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$sink_port/stats').read().decode())"; }

results="$bin_dir/trace_cost-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
echo "before $before ($before_bin), after $after ($after_bin); runs into $results" >&2
for round in $(seq 1 "$rounds"); do
  for concurrency in $concurrencies; do
    queue_defaults=""
    [[ "$concurrency" != default ]] && queue_defaults="concurrency: $concurrency"
    # Even rounds run the variants in reverse order, so that none always follows another.
    order=$variants
    (( round % 2 == 0 )) && order=$(printf '%s\n' $variants | tac | tr '\n' ' ')
    for variant in $order; do
      bin=$after_bin
      [[ $variant == before ]] && bin=$before_bin
      sink0=$(sink_stats)
      if [[ $variant == after_otel ]]; then
        out=$(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port" OTEL_SERVICE_NAME=delayq-bench \
          QUEUE_DEFAULTS="$queue_defaults" PAYLOAD_BYTES=${PAYLOAD_BYTES:-50} \
          bash "$here/burst_nodes.sh" "$bin" "$port" "$tasks" 2>/dev/null | tail -1)
      else
        out=$(env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT \
          QUEUE_DEFAULTS="$queue_defaults" PAYLOAD_BYTES=${PAYLOAD_BYTES:-50} \
          bash "$here/burst_nodes.sh" "$bin" "$port" "$tasks" 2>/dev/null | tail -1)
      fi
      sink1=$(sink_stats)
      load=$(cut -d' ' -f1 /proc/loadavg)
      python3 - "$out" "$variant" "$concurrency" "$round" "$load" "$sink0" "$sink1" "$tasks" <<'PY' | tee -a "$results"
import json, sys
out, variant, concurrency, round_, load, sink0, sink1, tasks = sys.argv[1:9]
try:
    run = json.loads(out)
except ValueError:
    run = {"error": out}
s0, s1 = json.loads(sink0), json.loads(sink1)
row = {"round": int(round_), "variant": variant, "concurrency": concurrency, "load": float(load)}
for key in ("deliveries", "tasks_per_s", "node_cpu_us_per_task", "redis_cpu_us_per_task", "error"):
    if key in run:
        row[key] = run[key]
row["otlp_requests"] = s1["requests"] - s0["requests"]
row["otlp_bytes_per_task"] = round((s1["bytes"] - s0["bytes"]) / int(tasks), 1)
print(json.dumps(row))
PY
    done
  done
done

python3 - "$results" "$before" "$after" <<'PY'
import json, statistics, sys
path, before, after = sys.argv[1:4]
runs = [json.loads(line) for line in open(path) if line.strip()]
fields = [("tasks_per_s", "tasks/s"), ("node_cpu_us_per_task", "node CPU µs/task"),
          ("redis_cpu_us_per_task", "Redis CPU µs/task"), ("otlp_bytes_per_task", "OTLP bytes/task")]
def median(variant, concurrency, key):
    values = [r[key] for r in runs if r["variant"] == variant and r["concurrency"] == concurrency
              and r.get(key) is not None and "error" not in r]
    return statistics.median(values) if values else None
print(f"medians of {path} (before {before}, after {after})")
print("| concurrency | variant | runs | " + " | ".join(label for _, label in fields) + " |")
print("|---|---|---|" + "---|" * len(fields))
for concurrency in dict.fromkeys(r["concurrency"] for r in runs):
    for variant in dict.fromkeys(r["variant"] for r in runs):
        count = sum(1 for r in runs if r["variant"] == variant and r["concurrency"] == concurrency and "error" not in r)
        cells = []
        for key, _ in fields:
            value, base = median(variant, concurrency, key), median("before", concurrency, key)
            if value is None:
                cells.append("–")
            elif variant != "before" and base and key != "otlp_bytes_per_task":
                cells.append(f"{value:g} ({value / base:.2f}×)")
            else:
                cells.append(f"{value:g}")
        print(f"| {concurrency} | {variant} | {count} | " + " | ".join(cells) + " |")
# The same ratios taken round by round (each variant against the `before` run of its own
# round, a minute apart), whose median a drifting load disturbs less than the medians'.
print()
print("| concurrency | variant | per-round ratio to before, median (range): " + " | ".join(label for _, label in fields[:3]) + " |")
print("|---|---|" + "---|" * 3)
for concurrency in dict.fromkeys(r["concurrency"] for r in runs):
    for variant in dict.fromkeys(r["variant"] for r in runs):
        if variant == "before":
            continue
        cells = []
        for key, _ in fields[:3]:
            ratios = []
            for round_ in sorted({r["round"] for r in runs}):
                pick = lambda v: next((r.get(key) for r in runs if r["round"] == round_ and r["variant"] == v
                                       and r["concurrency"] == concurrency and "error" not in r), None)
                value, base = pick(variant), pick("before")
                if value is not None and base:
                    ratios.append(value / base)
            cells.append(f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})" if ratios else "–")
        print(f"| {concurrency} | {variant} | " + " | ".join(cells) + " |")
PY
