#!/usr/bin/env bash
# producers/node: install the locked dependencies (only when node_modules is missing or the lock
# or Node changed), build the package and the tests with tsc, run every test with node --test.
# With --install-only, the dependencies only.
#
# The end-to-end tests need the host built (`make build`: target/debug/outboxd, or $OUTBOXD_BIN,
# and plugins/out/webhook.wasm), MariaDB on 127.0.0.1:3306 and PostgreSQL on 127.0.0.1:5432. What
# is missing skips its test loudly, or fails it when CI is set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

stamp=node_modules/.outboxd-install-stamp
want="$(sha256sum package-lock.json | cut -d' ' -f1) node $(node --version)"
if [ ! -d node_modules ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # better-sqlite3 compiles its addon here (its prebuilt binaries are not reachable): point
  # node-gyp at this Node's own headers so that it downloads nothing.
  if [ -z "${npm_config_nodedir:-}" ]; then
    prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
    if [ -f "$prefix/include/node/node.h" ]; then export npm_config_nodedir="$prefix"; fi
  fi
  for attempt in 1 2 3; do
    if npm ci --no-audit --no-fund; then break; fi
    if [ "$attempt" = 3 ]; then echo "producers/node: npm ci failed 3 times" >&2; exit 1; fi
    echo "producers/node: npm ci failed (attempt $attempt), retrying" >&2
    sleep $((attempt * 10))
  done
  echo "$want" > "$stamp"
fi
# --install-only: the dependencies and nothing more (.ci/run installs them beside the compile).
if [ "${1:-}" = --install-only ]; then exit 0; fi

rm -rf dist build
npm run --silent build
node --test build/test/*.test.js
