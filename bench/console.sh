#!/usr/bin/env bash
# bench/console.sh: the console's pages over a table with HISTORY rows (docs/OPERATIONS.md,
# "Console", "What each search costs").
#
# Per database, on a fresh database: `outboxd-bench --console-history HISTORY --rounds ROUNDS`
# loads HISTORY old `delivered` rows of one tenant set-based (INSERT … SELECT, then ANALYZE), then
# 2,000 failed and 1,000 + BACKLOG pending rows through the store; times each console page that reads the
# table ROUNDS times (the console writing the whole page, no HTTP) and prints p50/p95/max; then
# prints every console statement with its plan (EXPLAIN ANALYZE / ANALYZE).
#
# Environment: HISTORY (10000000), BACKLOG (0: pending rows more, over 500 rooms, newer than the
# history), ROUNDS (20), DATABASES (default here: "mariadb postgres"), and
# those of bench/lib.sh. The 10M load takes ~5 minutes on PostgreSQL and ~10 on MariaDB.
set -euo pipefail
DATABASES=${DATABASES:-mariadb postgres}
source "$(dirname "$0")/lib.sh"
HISTORY=${HISTORY:-10000000}
ROUNDS=${ROUNDS:-20}
BACKLOG=${BACKLOG:-0}

header "console: pages over $HISTORY rows of history and a backlog of $BACKLOG"
: > "$WORK/summary"
for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_console_$$"
  section "$db: outboxd-bench --console-history $HISTORY --console-backlog $BACKLOG --rounds $ROUNDS"
  bench --console-history "$HISTORY" --console-backlog "$BACKLOG" --rounds "$ROUNDS" --table console_history | tee "$WORK/out"
  awk -v db="$db" '/^page /{on=1; next} on && NF == 0 {on=0} on {print db ": " $0}' "$WORK/out" >> "$WORK/summary"
done

echo
echo "== summary (ms)"
cat "$WORK/summary"
