#!/usr/bin/env bash
# bench/isolation.sh: `make isolation` (tests/scripts/isolation.sh) with the release binary, so its
# figures come from the same build as the other bench/ scripts (docs/PERFORMANCE.md, "Sink
# isolation"). Through `outboxd run --drain`, default limits, on SQLite, MariaDB and PostgreSQL:
#   1. one poison event (its plugin traps) among 1000, max_attempts = 3;
#   2. 1000 valid events of 120 KB through the log plugin (64 MiB memory cap);
#   3. 300 events to the log sink beside 5 to a guest spinning until its 3 s deadline: how long
#      after the worker started the log rows were all marked.
# Environment: OUTBOXD (default target/release/outboxd). The databases are those of
# tests/scripts/isolation.sh (MYSQL_SERVER and POSTGRES_SERVER; it reaches them with the
# `mariadb` and `psql` clients on 127.0.0.1 as root / postgres). Needs plugins/out/log.wasm and
# chaos.wasm (`make rust-plugins`). ~1 minute.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${OUTBOXD:-}" ]; then OUTBOXD=$(realpath "$OUTBOXD"); else OUTBOXD=$REPO/target/release/outboxd; fi
[ -x "$OUTBOXD" ] || { echo "no binary at $OUTBOXD: cargo build --release --bin outboxd (or set OUTBOXD)" >&2; exit 1; }
echo "== isolation  date: $(date -u '+%Y-%m-%d %H:%M UTC')  commit: $(git -C "$REPO" rev-parse --short HEAD)  binary: $OUTBOXD"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# The script leaves its databases (outboxd_iso_poison, _large, _spin) for inspection; drop them.
drop() {
  for db in outboxd_iso_poison outboxd_iso_large outboxd_iso_spin; do
    mariadb -h127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
    PGOPTIONS=--client-min-messages=warning psql -q -h127.0.0.1 -Upostgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true
  done
}
trap drop EXIT
OUTBOXD=$OUTBOXD bash "$REPO/tests/scripts/isolation.sh"
