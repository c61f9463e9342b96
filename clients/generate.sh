#!/usr/bin/env bash
# Generates the clients of delayq's HTTP API from its OpenAPI document, the one way they are
# made (crates/http/tests/clients.rs regenerates them into a temporary directory and fails on
# any difference from the checked-in ones):
#
#   clients/openapi.json          the document, as a server with http.token serves it
#   clients/python/               openapi-python-client (PyPI), the package delayq_client
#   clients/typescript/src/client @hey-api/openapi-ts (npm) with its fetch client
#
# Usage: clients/generate.sh [OUT_DIR]   (default: clients/ itself)
#
# Needs `cargo xtask setup` once, then `eval "$(cargo xtask env)"` (DELAYQ_OPENAPI_PYTHON_CLIENT),
# and node with npm (the npm tools: clients/typescript/tools.sh, into target/tools/npm). With
# DELAYQ_OPENAPI_DOCUMENT set to a file, that document is used instead of dumping it with cargo.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/clients}
target=${CARGO_TARGET_DIR:-$root/target}
python_client=${DELAYQ_OPENAPI_PYTHON_CLIENT:-}
if [[ -z "$python_client" || ! -x "$python_client" ]]; then
  echo "openapi-python-client not found (DELAYQ_OPENAPI_PYTHON_CLIENT): run \`cargo xtask setup\`, then \`eval \"\$(cargo xtask env)\"\`" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# 1. The document.
if [[ -n "${DELAYQ_OPENAPI_DOCUMENT:-}" ]]; then
  cp "$DELAYQ_OPENAPI_DOCUMENT" "$out/openapi.json.tmp"
else
  (cd "$root" && cargo run --quiet --locked -p delayq-http --example openapi) > "$out/openapi.json.tmp"
fi
mv "$out/openapi.json.tmp" "$out/openapi.json"

# 2. Python. The generator formats its output with ruff, from the same environment (without
# leaving ruff's cache in the output).
RUFF_NO_CACHE=true PATH="$(dirname "$python_client"):$PATH" "$python_client" generate \
  --path "$out/openapi.json" \
  --config "$root/clients/python-config.yaml" \
  --meta uv \
  --output-path "$out/python" \
  --overwrite \
  --fail-on-warning >&2

# 3. TypeScript, with the pinned tools of clients/typescript/package-lock.json.
npm_bin=$("$root/clients/typescript/tools.sh")
mkdir -p "$out/typescript/src"
rm -rf "$out/typescript/src/client"
"$npm_bin/openapi-ts" \
  --input "$out/openapi.json" \
  --output "$out/typescript/src/client" \
  --client @hey-api/client-fetch \
  --silent >&2
