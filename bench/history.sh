#!/usr/bin/env bash
# bench/history.sh: delivered history does not slow claims, and retention's cleanup beside live
# claims (docs/PERFORMANCE.md, "History does not slow claims" and "Retention").
#
# Per database, on a fresh database:
#   1. `outboxd-bench --history-scaling SIZES`: one tenant's history of old `delivered` rows grows
#      through SIZES (set-based INSERT … SELECT, then ANALYZE); at each size ROUNDS timed calls of
#      claim + mark of 500 fresh rows. Prints p50/p90/p99, ev/s, and the ratio to the smallest size.
#   2. `outboxd-bench --retention --history RET_HISTORY`: claim + mark of 10 fresh rows, timed in
#      5 s windows: 3 quiet windows, then while the real retention pass (batch 1000, pause 100 ms)
#      deletes the whole history. Prints the pooled percentiles and cleanup / quiet.
#
# Environment: SIZES (10000,100000,1000000), ROUNDS (100), RET_HISTORY (200000), and those of
# bench/lib.sh. ~2-4 minutes per database at the defaults; 10M sizes take ~15 minutes each.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SIZES=${SIZES:-10000,100000,1000000}
ROUNDS=${ROUNDS:-100}
RET_HISTORY=${RET_HISTORY:-200000}

header "history: scaling over $SIZES, retention of $RET_HISTORY rows"
: > "$WORK/summary"

for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_hist_$$"
  section "$db: outboxd-bench --history-scaling $SIZES --rounds $ROUNDS"
  bench --history-scaling "$SIZES" --rounds "$ROUNDS" --table hist_scaling | tee "$WORK/out"
  awk -v db="$db" '$1 ~ /^[0-9]+$/ { printf "%-9s scaling   history %9s: p50 %7s ms  p99 %7s ms  %6s ev/s  p50 %5sx  ev/s %5sx\n",
    db, $1, $4, $6, $7, $8, $9 }' "$WORK/out" >> "$WORK/summary"

  section "$db: outboxd-bench --retention --history $RET_HISTORY"
  bench --retention --history "$RET_HISTORY" --table hist_retention | tee "$WORK/out"
  awk -v db="$db" '
    /^quiet all/   { printf "%-9s retention quiet:   p50 %7s ms  p90 %7s ms  p99 %7s ms  %6s claims/s\n", db, $5, $6, $7, $8 }
    /^cleanup all/ { printf "%-9s retention cleanup: p50 %7s ms  p90 %7s ms  p99 %7s ms  %6s claims/s\n", db, $5, $6, $7, $8 }
    /^cleanup \/ quiet/ { printf "%-9s retention %s\n", db, $0 }
    /^cleanup: /   { printf "%-9s retention %s\n", db, $0 }' "$WORK/out" >> "$WORK/summary"
done

echo
echo "== summary"
cat "$WORK/summary"
