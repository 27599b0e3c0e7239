#!/usr/bin/env bash
# bench/ab.sh OLD NEW: two builds of outboxd-bench side by side, alternating, on each database: did a
# change move throughput or latency? (The before/after check of a restructuring.)
#
# OLD and NEW are `outboxd-bench` binaries (e.g. release builds of two commits: `git worktree add
# /tmp/old COMMIT && cargo build --release --bin outboxd-bench` there); an `outboxd` binary of a
# commit from before the benchmark had its own binary runs as `outboxd bench`. For ROUNDS rounds,
# on each database of DATABASES, in the order OLD, NEW (NEW, OLD on even rounds, so neither always goes
# first):
#   - throughput: `outboxd-bench --events EVENTS --shapes raw,outboxd` through the chaos plugin
#     on a fresh table; the figure is outboxd's drain over the raw SQL loop of the same run (the
#     machine's load moves both);
#   - latency: `outboxd-bench --rate RATE --seconds 10`, commit → delivered p50 / p99.
# Prints one summary line per run and, per database, the medians of each build.
#
# Environment: ROUNDS (3), EVENTS (50000), RATE (200), and those of bench/lib.sh (DATABASES,
# MYSQL_SERVER, POSTGRES_SERVER). ~2 minutes per round and database.
set -euo pipefail
OLD=$(realpath "${1:?usage: bench/ab.sh OLD_BINARY NEW_BINARY}")
NEW=$(realpath "${2:?usage: bench/ab.sh OLD_BINARY NEW_BINARY}")
export OUTBOXD_BENCH=$NEW
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
EVENTS=${EVENTS:-50000}
RATE=${RATE:-200}

header "A/B: old $OLD against new $NEW"
echo "old: $OLD (file time $(date -u -r "$OLD" '+%Y-%m-%d %H:%M UTC'))"
: > "$WORK/summary"

# bench_of BUILD ARGS...: the benchmark of binary BUILD on $URL (`outboxd-bench ARGS`, or
# `outboxd bench ARGS` for an `outboxd` from before the benchmark had a binary of its own).
bench_of() {
  local build=$1
  shift
  if [ "$(basename "$build")" = outboxd ]; then
    "$build" --database-url "$URL" bench "$@"
  else
    "$build" --database-url "$URL" "$@"
  fi
}

# one BUILD LABEL DB ROUND: a throughput run and a latency run of binary BUILD.
one() {
  local build=$1 label=$2 db=$3 round=$4 ratio lat
  section "$db, round $round, $label"
  bench_of "$build" --events "$EVENTS" --shapes raw,outboxd \
    "${PLUGIN_ARGS[@]}" --table "ab_${label}_$round" | tee "$WORK/thru"
  # outboxd's drain rate over raw's (column 7 in every version's report; the ratio columns
  # after it moved between versions).
  ratio=$(awk '$1 == "raw" { raw = $7 } $1 == "outboxd" { ours = $7 }
    END { if (raw > 0) printf "%.2fx", ours / raw }' "$WORK/thru")
  bench_of "$build" --rate "$RATE" --seconds 10 "${PLUGIN_ARGS[@]}" \
    --table "ab_lat_${label}_$round" | tee "$WORK/lat"
  lat=$(awk '/^ *rate +events/ { getline; print $5, $7 }' "$WORK/lat")
  echo "$db $label $round ${ratio%x} $lat" >> "$WORK/summary"
}

for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_ab_$$"
  for round in $(seq 1 "$ROUNDS"); do
    if ((round % 2)); then
      one "$OLD" old "$db" "$round"; one "$NEW" new "$db" "$round"
    else
      one "$NEW" new "$db" "$round"; one "$OLD" old "$db" "$round"
    fi
  done
done

echo
echo "== summary: outboxd drain / raw loop (same run), commit → delivered at $RATE/s"
printf "%-9s %-4s %5s %10s %8s %8s\n" database build round "vs raw" "p50 ms" "p99 ms"
awk '{ printf "%-9s %-4s %5s %9sx %8s %8s\n", $1, $2, $3, $4, $5, $6 }' "$WORK/summary"
echo
echo "== medians per database and build"
printf "%-9s %-4s %10s %8s %8s\n" database build "vs raw" "p50 ms" "p99 ms"
for db in $DATABASES; do
  for build in old new; do
    awk -v db="$db" -v b="$build" '$1 == db && $2 == b { print $4, $5, $6 }' "$WORK/summary" |
      python3 -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
if rows:
    cols = list(zip(*rows))
    print(*(f"{statistics.median(c):.2f}" for c in cols))' |
      awk -v db="$db" -v b="$build" '{ printf "%-9s %-4s %9sx %8s %8s\n", db, b, $1, $2, $3 }'
  done
done
