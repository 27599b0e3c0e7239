#!/usr/bin/env bash
# bench/index_writes.sh: what delivering an event writes, with the retry and lease indexes as this
# version has them (`live`: PostgreSQL's over live rows only, migration 0006; MariaDB's without
# the status, migration 0003) and as migration 0001 built them (`whole`: led by the status, over
# every row), side by side (docs/PERFORMANCE.md, "Index writes per event").
#
# Each round, for each variant on a fresh database: `outboxd-bench --shapes raw-1idx,outboxd`
# (EVENTS events per shape enqueued and drained through the no-op plugin, default config). For
# `whole` the table is migrated first and its two indexes rebuilt the old way. Reported per
# variant: the outboxd shape's drain rate and its ratio over raw-1idx (the raw loop on a table
# with one claim index) in the same run; the log the outboxd shape wrote per event, enqueue
# included (PostgreSQL: WAL bytes from `pg_current_wal_lsn()`; MariaDB: redo bytes from
# `Innodb_lsn_current`, server-wide, so keep the server otherwise idle); and the size of each
# index of the outbox table after it (8 KiB pages on PostgreSQL, where no vacuum runs; 16 KiB
# pages on MariaDB after `ANALYZE TABLE`). Variants alternate, ROUNDS rounds.
#
# Environment: EVENTS (100000), ROUNDS (2), DATABASES (default "postgres mariadb") and those of
# bench/lib.sh. Takes ~2 minutes per round and database.
set -euo pipefail
DATABASES=${DATABASES:-postgres mariadb}
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-100000}
ROUNDS=${ROUNDS:-2}
TABLE=iw_outbox

header "index writes per event: $EVENTS events per shape, $ROUNDS rounds"
: > "$WORK/summary"

# on_db DB SQL: SQL on the current database ($URL), one value per line.
on_db() {
  case $1 in
    postgres) PGOPTIONS=--client-min-messages=warning psql -qAt "$URL" -c "$2" ;;
    mariadb) my_sql "$MYSQL_SERVER" "USE ${URL##*/}; $2" ;;
  esac
}

# log_position DB: the server's log position in bytes (PostgreSQL: WAL LSN; MariaDB: redo written).
log_position() {
  case $1 in
    postgres) on_db postgres "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint" ;;
    mariadb) on_db mariadb "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_LSN_CURRENT'" ;;
  esac
}

# index_pages DB: "name=pages …" for each index of the outbox table.
index_pages() {
  case $1 in
    postgres) on_db postgres "SELECT string_agg(replace(c.relname, 'idx_${TABLE}_', '') || '=' ||
        pg_relation_size(c.oid) / 8192, ' ' ORDER BY c.relname)
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE i.indrelid = '$TABLE'::regclass" ;;
    mariadb)
      on_db mariadb "ANALYZE TABLE $TABLE" >/dev/null
      on_db mariadb "SELECT GROUP_CONCAT(CONCAT(REPLACE(index_name, 'idx_${TABLE}_', ''), '=', stat_value)
          ORDER BY index_name SEPARATOR ' ')
        FROM mysql.innodb_index_stats
        WHERE database_name = DATABASE() AND table_name = '$TABLE' AND stat_name = 'size'" ;;
  esac
}

# measure DB VARIANT: one bench run on a fresh database; its line goes to the summary.
measure() {
  local db=$1 variant=$2 before after
  fresh_db "$db" "outboxd_bench_iw_$$"
  OUTBOXD_DATABASE_TABLE=$TABLE "$OUTBOXD" --database-url "$URL" migrate >/dev/null
  if [ "$variant" = whole ]; then
    on_db "$db" "DROP INDEX idx_${TABLE}_retry ON $TABLE" 2>/dev/null || on_db "$db" "DROP INDEX idx_${TABLE}_retry"
    on_db "$db" "DROP INDEX idx_${TABLE}_lease ON $TABLE" 2>/dev/null || on_db "$db" "DROP INDEX idx_${TABLE}_lease"
    on_db "$db" "CREATE INDEX idx_${TABLE}_retry ON $TABLE (app_code, status, next_retry_at_ms, created_at_ms, event_id)"
    on_db "$db" "CREATE INDEX idx_${TABLE}_lease ON $TABLE (app_code, status, lock_until_ms, created_at_ms, event_id)"
  fi
  section "$db, $variant"
  # The yardstick first, on its own table; then the log position, and outboxd's shape alone.
  bench --events "$EVENTS" --shapes raw-1idx "${PLUGIN_ARGS[@]}" --table "$TABLE" | tee "$WORK/yard"
  before=$(log_position "$db")
  bench --events "$EVENTS" --shapes outboxd "${PLUGIN_ARGS[@]}" --table "$TABLE" | tee "$WORK/out"
  after=$(log_position "$db")
  awk -v db="$db" -v variant="$variant" -v logb=$(((after - before) / EVENTS)) -v pages="$(index_pages "$db")" \
    -v yard="$(awk '$1 == "raw-1idx" { print $7 }' "$WORK/yard")" '$1 == "outboxd" {
    printf "%-9s %-7s %10s %10s %8.2f %9s  %s\n", db, variant, $7, yard, $7 / yard, logb, pages }' \
    "$WORK/out" >> "$WORK/summary"
}

for db in $DATABASES; do
  for ((round = 1; round <= ROUNDS; round++)); do
    if ((round % 2)); then measure "$db" whole; measure "$db" live; else measure "$db" live; measure "$db" whole; fi
  done
done

echo
echo "== summary (drain ev/s of outboxd's shape and of raw-1idx just before it; log bytes per event, enqueue included; index pages after)"
printf "%-9s %-7s %10s %10s %8s %9s  %s\n" database indexes "outboxd" "raw-1idx" "ratio" "log B/ev" "index pages"
cat "$WORK/summary"
