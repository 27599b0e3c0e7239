#!/usr/bin/env bash
# bench/partitions.sh: outboxd (unordered and per-room) beside the one-index raw loop at the
# issue's scale, and the row writes it costs per delivered event (docs/PERFORMANCE.md,
# "Partitions").
#
# Per database (PostgreSQL and MariaDB by default: SQLite has one partition), on a fresh database,
# every event through the chaos plugin answering `ok`, default config (batch 1000, 1 loop):
#   1. shapes raw-1idx, outboxd, per-room side by side, EVENTS events over ROOMS rooms each;
#      `vs 1idx` is the drain rate over raw-1idx's in the same run;
#   2. row writes: the outboxd shape alone on a table of its own, the outbox table's updates
#      and deletes counted by the database around it (PostgreSQL: pg_stat_user_tables n_tup_upd +
#      n_tup_del of that table; MariaDB: Handler_update + Handler_delete, server-wide, on a quiet
#      server) over the events delivered.
#
# Environment: EVENTS (200000), ROOMS (500), DATABASES (default "mariadb postgres"), and those of
# bench/lib.sh.
set -euo pipefail
DATABASES=${DATABASES:-mariadb postgres}
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-200000}
ROOMS=${ROOMS:-500}

header "partitions: $EVENTS events over $ROOMS rooms per shape"
: > "$WORK/summary"

# writes DB TABLE: the outbox table's row updates + deletes so far (MariaDB: server-wide).
writes() {
  case $1 in
    postgres)
      PGOPTIONS=--client-min-messages=warning psql -qAt "$URL" -c "SELECT pg_stat_force_next_flush()" >/dev/null
      PGOPTIONS=--client-min-messages=warning psql -qAt "$URL" -c \
        "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables WHERE relname = '$2'" ;;
    mariadb) my_sql "$MYSQL_SERVER" "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_update', 'Handler_delete')" |
      awk '{ n += $2 } END { print n }' ;;
  esac
}

for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_part_$$"
  section "$db: outboxd-bench --events $EVENTS --rooms $ROOMS"
  bench --events "$EVENTS" --rooms "$ROOMS" --shapes raw-1idx,outboxd,per-room \
    "${PLUGIN_ARGS[@]}" --table part_main | tee "$WORK/out"
  awk -v db="$db" '$1 ~ /^(raw-1idx|outboxd|per-room)$/ {
    printf "%-9s %-21s %11s %8s\n", db, $1, $7, $9 }' "$WORK/out" >> "$WORK/summary"
  section "$db: row writes of the outboxd shape"
  bench --events 1000 --shapes outboxd "${PLUGIN_ARGS[@]}" --table part_writes >/dev/null
  before=$(writes "$db" part_writes)
  bench --events "$EVENTS" --rooms "$ROOMS" --shapes outboxd "${PLUGIN_ARGS[@]}" --table part_writes | tail -1
  after=$(writes "$db" part_writes)
  awk -v db="$db" -v w=$((after - before)) -v n="$EVENTS" \
    'BEGIN { printf "%-9s %-21s row writes per delivered event: %.3f (%d over %d)\n", db, "outboxd", w / n, w, n }' |
    tee -a "$WORK/summary"
done

echo
echo "== summary (drain events/s; ratios within one run)"
printf "%-9s %-21s %11s %8s\n" database shape "drain ev/s" "vs 1idx"
cat "$WORK/summary"
