#!/usr/bin/env bash
# bench/latency.sh: commit → delivered latency per database, with the default configuration
# (docs/PERFORMANCE.md, "Current figures").
#
# `outboxd-bench --rate N --seconds S`: producers (4, each on its own connection) commit one row per
# transaction at N rows/s; the worker, configured as `outboxd run` would be (its database's wake-up
# feed included), delivers them through the chaos plugin answering `ok`. A row's latency runs from
# its producer's COMMIT returning to its `delivered` mark returning; the first second's rows are
# not counted (the step from idle to busy). Per database, each run on a fresh database:
#   - steady: 200 rows/s and 2,000 rows/s for STEADY_SECS seconds;
#   - sparse: one row every 2 s for SPARSE_SECS seconds after 2 s of quiet, every row counted
#     (a quiet room: what the wake-up feed, or the idle probe without one, costs).
# MariaDB here is whatever MYSQL_SERVER is (the shared server writes no binlog, so its loops
# probe); bench/binlog_wake.sh measures a MariaDB with a binlog.
#
# Environment: STEADY_SECS (10), SPARSE_SECS (40), PARTITIONS (the table's partitions per tenant,
# `outboxd migrate --partitions`; default: a new table's 64), and those of bench/lib.sh. ~1.5 min
# per database.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
STEADY_SECS=${STEADY_SECS:-10}
SPARSE_SECS=${SPARSE_SECS:-40}

header "latency: commit → delivered, default config"
: > "$WORK/summary"
n=0

# run DB LABEL ARGS...: one latency run on a fresh database; its figures go to the summary.
run() {
  local db=$1 label=$2 wake; shift 2
  n=$((n + 1))
  fresh_db "$db" "outboxd_bench_lat_$$_$n"
  section "$db, $label: outboxd-bench $*"
  bench "$@" "${PLUGIN_ARGS[@]}" ${PARTITIONS:+--partitions "$PARTITIONS"} --table lat | tee "$WORK/out"
  wake=$(sed -n 's/.*  wake: \(.*\)  commit feed.*/\1/p' "$WORK/out" | cut -c1-24)
  awk -v db="$db" -v label="$label" -v wake="$wake" '
    /^ *rate +events +counted/ { getline; row = $0 }
    /^claims: / { claims = $2 }
    END { split(row, f); printf "%-9s %-16s %-24s %8s %8s %8s %8s %8s %8s %7s\n",
            db, label, wake, f[3], f[4], f[5], f[6], f[7], f[8], claims }' "$WORK/out" >> "$WORK/summary"
}

for db in $DATABASES; do
  run "$db" "200/s" --rate 200 --seconds "$STEADY_SECS"
  run "$db" "2000/s" --rate 2000 --seconds "$STEADY_SECS"
  run "$db" "1 row / 2 s" --every 2s --seconds "$SPARSE_SECS" --quiet-first 2s
done

echo
echo "== summary (commit → delivered, ms)"
printf "%-9s %-16s %-24s %8s %8s %8s %8s %8s %8s %7s\n" database load wake counted "actual/s" p50 p90 p99 max claims
cat "$WORK/summary"
