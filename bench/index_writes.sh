#!/usr/bin/env bash
# bench/index_writes.sh: what delivering an event writes on PostgreSQL, with the retry and lease
# indexes over live rows only (migration 0006, `live`) and over every row (as migration 0001 built
# them, `whole`), side by side (docs/PERFORMANCE.md, "Index writes per event").
#
# Each round, for each variant on a fresh database: `outboxd bench --shapes outboxd` (EVENTS
# events enqueued and drained through the no-op plugin, default config). For `whole` the table
# is migrated first and its two indexes rebuilt over every row. Reported per variant: the drain
# rate; the WAL the run wrote per event, enqueue included (`pg_current_wal_lsn()` before and
# after); and, with no vacuum run, the size of each index of the outbox table after it (entries
# dead or alive, in 8 KiB pages). Variants alternate, ROUNDS rounds, so compare neighbours.
#
# Environment: EVENTS (100000), ROUNDS (2), and those of bench/lib.sh (DATABASES is ignored).
# Takes ~2 minutes per round.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-100000}
ROUNDS=${ROUNDS:-2}
TABLE=iw_outbox

header "index writes per event (PostgreSQL): $EVENTS events per shape, $ROUNDS rounds"
: > "$WORK/summary"

# psql_db SQL: SQL on the current database ($URL), unaligned, no headers.
psql_db() {
  PGOPTIONS=--client-min-messages=warning psql -qAt "$URL" -c "$1"
}

# measure VARIANT: one bench run on a fresh database; its line goes to the summary.
measure() {
  local variant=$1 start end wal pages
  fresh_db postgres "outboxd_bench_iw_$$"
  if [ "$variant" = whole ]; then
    OUTBOXD_DATABASE_TABLE=$TABLE "$OUTBOXD" --database-url "$URL" migrate >/dev/null
    psql_db "DROP INDEX idx_${TABLE}_retry; DROP INDEX idx_${TABLE}_lease;
      CREATE INDEX idx_${TABLE}_retry ON $TABLE (app_code, status, next_retry_at_ms, created_at_ms, event_id);
      CREATE INDEX idx_${TABLE}_lease ON $TABLE (app_code, status, lock_until_ms, created_at_ms, event_id);"
  fi
  section "$variant"
  start=$(psql_db "SELECT pg_current_wal_lsn()")
  bench --events "$EVENTS" --shapes outboxd "${PLUGIN_ARGS[@]}" --table "$TABLE" | tee "$WORK/out"
  end=$(psql_db "SELECT pg_current_wal_lsn()")
  wal=$(psql_db "SELECT round(pg_wal_lsn_diff('$end', '$start') / $EVENTS)")
  pages=$(psql_db "SELECT string_agg(replace(c.relname, 'idx_${TABLE}_', '') || '=' ||
      pg_relation_size(c.oid) / 8192, ' ' ORDER BY c.relname)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = '$TABLE'::regclass")
  awk -v variant="$variant" -v wal="$wal" -v pages="$pages" '$1 == "outboxd" {
    printf "%-7s %10s %10s  %s\n", variant, $7, wal, pages }' "$WORK/out" >> "$WORK/summary"
}

for ((round = 1; round <= ROUNDS; round++)); do
  if ((round % 2)); then measure whole; measure live; else measure live; measure whole; fi
done

echo
echo "== summary (outboxd shape; WAL per event over the whole run, enqueue included; index pages after it)"
printf "%-7s %10s %10s  %s\n" indexes "drain ev/s" "WAL B/ev" "index pages"
cat "$WORK/summary"
