#!/bin/bash
# Part of BENCHMARKS.md (issue 25): delayq (bench/postgres_nodes.sh at the documented defaults)
# and the peers' configs (run.sh here) one after the other, ROUNDS times, each on a fresh private
# PostgreSQL; every JSON line is printed with "round" and "system" added.
# usage: alternate.sh BINARY PORT [ROUNDS] [N]
# Environment: SYSTEMS (default "delayq pgboss-batch100 graphile-default graphile-batched
# pgboss-poll0.5 pgboss-default"), and what postgres_nodes.sh and run.sh take (BURST_WAIT_S...).
set -uo pipefail
BIN=$(readlink -f "$1"); P=$2; ROUNDS=${3:-3}; N=${4:-100000}
HERE=$(cd "$(dirname "$0")" && pwd)
SYSTEMS=${SYSTEMS:-delayq pgboss-batch100 graphile-default graphile-batched pgboss-poll0.5 pgboss-default}
for r in $(seq 1 "$ROUNDS"); do
  for s in $SYSTEMS; do
    if [ "$s" = delayq ]; then cmd=("$HERE/../../postgres_nodes.sh" "$BIN" "$P" "$N")
    else cmd=("$HERE/run.sh" "$s" "$P" "$N"); fi
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
