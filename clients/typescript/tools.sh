#!/usr/bin/env bash
# Installs the pinned npm tools of clients/typescript (@hey-api/openapi-ts, typescript) with
# `npm ci` from its package-lock.json into target/tools/npm (again only when the lock file
# changed), never into the source tree, and prints their bin directory. Callers that run at the
# same time (the client tests run in parallel threads) take turns on a lock file: two `npm ci`
# in one directory fail with ENOTEMPTY.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
npm_dir="${CARGO_TARGET_DIR:-$root/target}/tools/npm"
mkdir -p "$(dirname "$npm_dir")"
exec 9>"$npm_dir.lock"
flock 9
if ! cmp -s "$here/package-lock.json" "$npm_dir/.installed-lock.json" \
  || [[ ! -x "$npm_dir/node_modules/.bin/openapi-ts" || ! -x "$npm_dir/node_modules/.bin/tsc" ]]; then
  if ! command -v npm >/dev/null; then
    echo "npm not found: run \`cargo xtask setup\` (it installs node and npm)" >&2
    exit 1
  fi
  mkdir -p "$npm_dir"
  rm -f "$npm_dir/.installed-lock.json"
  cp "$here/package.json" "$here/package-lock.json" "$npm_dir/"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
  cp "$here/package-lock.json" "$npm_dir/.installed-lock.json"
fi
echo "$npm_dir/node_modules/.bin"
