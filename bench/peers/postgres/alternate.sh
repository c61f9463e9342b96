#!/bin/bash
# Part of BENCHMARKS.md (issue 25): delayq (bench/postgres_nodes.sh at the documented defaults)
# and the peers' configs (run.sh here) one after the other, ROUNDS times, each on a fresh private
# PostgreSQL; every JSON line is printed with "round" and "system" added.
# usage: alternate.sh BINARY PORT [ROUNDS] [N]
# Environment: SYSTEMS (default "delayq pgboss-batch100 graphile-default graphile-batched
# pgboss-poll0.5 pgboss-default"; also delayq-c512: postgres_nodes.sh with QUEUE_DEFAULTS=
# 'concurrency: 512', and pgbench: `pgbench -S -c 4 -T 20` select-only on a fresh private server
# initialised at scale 10), and what postgres_nodes.sh and run.sh take (BURST_WAIT_S...).
set -uo pipefail
BIN=$(readlink -f "$1"); P=$2; ROUNDS=${3:-3}; N=${4:-100000}
HERE=$(cd "$(dirname "$0")" && pwd)
SYSTEMS=${SYSTEMS:-delayq pgboss-batch100 graphile-default graphile-batched pgboss-poll0.5 pgboss-default}
for r in $(seq 1 "$ROUNDS"); do
  for s in $SYSTEMS; do
    case $s in
      delayq) cmd=("$HERE/../../postgres_nodes.sh" "$BIN" "$P" "$N") ;;
      delayq-c512) cmd=(env "QUEUE_DEFAULTS=concurrency: 512" "$HERE/../../postgres_nodes.sh" "$BIN" "$P" "$N") ;;
      pgbench) cmd=(bash -c '. "$1/../../pg_private.sh"; pg_private_start "$2"
        pgbench -q -i -s 10 -h 127.0.0.1 -p "$2" -U postgres postgres >/dev/null 2>&1
        pgbench -S -c 4 -j 2 -T 20 -h 127.0.0.1 -p "$2" -U postgres postgres 2>/dev/null | python3 -c "
import sys, json, re
t = sys.stdin.read()
m = re.search(r\"tps = ([0-9.]+) \\(without initial connection time\\)\", t)
l = re.search(r\"latency average = ([0-9.]+) ms\", t)
print(json.dumps({\"scenario\": \"pgbench -S -c 4 -j 2 -T 20\", \"tps\": float(m.group(1)) if m else None, \"latency_ms\": float(l.group(1)) if l else None}))"
        pg_private_stop' _ "$HERE" "$P") ;;
      *) cmd=("$HERE/run.sh" "$s" "$P" "$N") ;;
    esac
    "${cmd[@]}" 2>>"${ERRORS:-/dev/stderr}" | python3 -c '
import sys, json, time
for line in sys.stdin:
    try:
        o = json.loads(line)
    except ValueError:
        continue
    print(json.dumps({"round": int(sys.argv[1]), "system": sys.argv[2], "at": time.strftime("%H:%M:%S"), **o}), flush=True)
' "$r" "$s"
  done
done
