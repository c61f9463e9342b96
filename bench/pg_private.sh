# Sourced by bench/postgres_nodes.sh and bench/peers/postgres/run.sh (BENCHMARKS.md, issue 25).
# pg_private_start PORT: a private PostgreSQL in a new temp dir $D (initdb, data in $D/data, log
# in $D/postgres.log, socket in $D), on 127.0.0.1:PORT, fsync off as the tests run it,
# pg_stat_statements loaded and created in database postgres; as nobody when run as root.
# Sets D, PG_BIN (default: the newest /usr/lib/postgresql/*/bin), AS and URL. PG_OPTS: more
# server settings, appended as they are (e.g. '-c plan_cache_mode=force_generic_plan').
# pg_private_stop: stops it (immediate) and removes $D unless KEEP is set.
pg_private_start() {
  local port=$1
  PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
  D=$(mktemp -d)
  chmod 755 "$D"
  AS=()
  if [ "$(id -u)" = 0 ]; then chown nobody "$D"; AS=(runuser -u nobody --); fi
  "${AS[@]}" "$PG_BIN/initdb" -D "$D/data" -U postgres --auth=trust >/dev/null
  "${AS[@]}" "$PG_BIN/pg_ctl" -D "$D/data" -l "$D/postgres.log" -w -o \
    "-p $port -k $D -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_preload_libraries=pg_stat_statements ${PG_OPTS:-}" start >/dev/null
  psql -X -q -h 127.0.0.1 -p "$port" -U postgres -c "CREATE EXTENSION pg_stat_statements" postgres
  URL="postgres://postgres@127.0.0.1:$port/postgres"
}
pg_private_stop() {
  "${AS[@]}" "$PG_BIN/pg_ctl" -D "$D/data" -m immediate stop >/dev/null 2>&1 || true
  if [ -n "${KEEP:-}" ]; then echo "kept $D" >&2; else rm -rf "$D"; fi
}
