#!/usr/bin/env bash
# The producers' demo: after `make demo` (a migrated target/demo/outboxd.db and its host), the Go,
# Python and TypeScript examples each write one RoomGiftSent event in a transaction of their own;
# then `make demo`'s host (`run --drain`, the log plugin) delivers them. Fails unless each of the
# three event ids the examples print is `delivered` afterwards.
#
# Run by `make demo-producers` (and `make test-producers`, after each library's test.sh has
# installed its toolchain: Go from Debian, the venv in .toolchains/producers-python, npm ci).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTBOXD=${OUTBOXD_BIN:-target/debug/outboxd}
DB=target/demo/outboxd.db
HOST=("$OUTBOXD" --config demo/outboxd.toml)
export OUTBOXD_ADMIN_LISTEN=""

[ -f "$DB" ] || { echo "producers/demo.sh: $DB is missing: run \`make demo\` first" >&2; exit 1; }

ids=()
if command -v go >/dev/null; then
  ids+=("$(cd producers/go/example && GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
    go run . "../../../$DB")")
elif [ -n "${CI:-}" ]; then
  echo "producers/demo.sh: no Go toolchain (as root, producers/go/test.sh installs it)" >&2; exit 1
else
  echo "producers/demo.sh: SKIPPED the Go example (no Go toolchain; as root, producers/go/test.sh installs it)" >&2
fi
ids+=("$(.toolchains/producers-python/bin/python producers/python/example.py "$DB")")
ids+=("$(node producers/node/build/example.js "$DB")")
echo "written: ${ids[*]}"

"${HOST[@]}" run --drain 2>/dev/null
for id in "${ids[@]}"; do
  [[ $id =~ ^evt_[0-9a-f]{29}$ ]] || { echo "producers/demo.sh: not an event id: '$id'" >&2; exit 1; }
  status=$(python3 - "$DB" "$id" <<'PY'
import sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute(
    "SELECT status FROM room_outbox WHERE event_id = ?", (sys.argv[2],)).fetchone()
print(row[0] if row else "missing")
PY
)
  [ "$status" = delivered ] || { echo "producers/demo.sh: $id is $status, not delivered" >&2; exit 1; }
done
echo "delivered by make demo's host: ${ids[*]}"
"${HOST[@]}" status
