#!/usr/bin/env bash
# Delivery (claim → publish → mark) throughput on a table holding 1M old `delivered` rows, quiet
# vs while retention deletes those rows (`outboxd purge`, default batch 1000 / pause 100ms).
# See docs/PERFORMANCE.md#retention. Usage: scripts/bench-retention.sh mysql|postgres [ROWS]
set -euo pipefail
backend=${1:?mysql or postgres}
rows=${2:-1000000}
outboxd=${OUTBOXD:-target/debug/outboxd}
table=outboxd_retention_bench
case $backend in
  mysql)    url=mysql://root@127.0.0.1:3306/test
            sql() { mysql -uroot -h127.0.0.1 -P3306 test -e "$1"; }
            envelope="''" ;;
  postgres) url=postgres://postgres@127.0.0.1:5432/postgres
            sql() { psql -q -h 127.0.0.1 -U postgres -d postgres -c "$1"; }
            envelope="''::bytea" ;;
  *) echo "usage: $0 mysql|postgres [ROWS]" >&2; exit 2 ;;
esac
export OUTBOXD_DATABASE_TABLE=$table OUTBOXD_ADMIN_LISTEN="" RUST_LOG=warn
run() { "$outboxd" --database-url "$url" "$@"; }
bench() { run bench --events 20000 --shapes outboxd --table "$table" | tail -1; }

run migrate >/dev/null
sql "DELETE FROM $table"
digits="(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
         UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
sql "INSERT INTO $table (app_code, event_id, event_type, room_id, status, envelope, created_at_ms, updated_at_ms)
     SELECT 'history', CONCAT('h', n), 'History', CONCAT('room', n % 1000), 'delivered', $envelope, n, n
     FROM (SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d + 100000*g.d AS n
           FROM $digits a CROSS JOIN $digits b CROSS JOIN $digits c CROSS JOIN $digits e
           CROSS JOIN $digits f CROSS JOIN $digits g) s WHERE n < $rows" >/dev/null
case $backend in postgres) sql "ANALYZE $table" ;; mysql) sql "ANALYZE TABLE $table" >/dev/null ;; esac

echo "database: $url  history: $rows delivered rows  build: $outboxd"
echo "quiet:    $(bench)"
started=$(date +%s)
OUTBOXD_RETENTION_DELIVERED=1m OUTBOXD_RETENTION_FAILED=off run purge --app history > /tmp/purge.$$ &
purge=$!
sleep 2
echo "cleaning: $(bench)"
kill -0 $purge 2>/dev/null && echo "(the cleanup was still running when the second run ended)" \
  || echo "WARNING: the cleanup ended before the second run did"
wait $purge
echo "cleanup:  $(cat /tmp/purge.$$) in $(( $(date +%s) - started ))s"
rm -f /tmp/purge.$$
echo "quiet:    $(bench)   (after the cleanup)"
