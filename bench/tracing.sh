#!/usr/bin/env bash
# bench/tracing.sh: the cost of tracing (docs/PERFORMANCE.md, "Tracing"). Per database, on a
# fresh database, EVENTS events over ROOMS rooms through the chaos plugin answering `ok`, default
# config: the `outboxd` shape (tracing off) beside the `traced` shape (every span exported over
# OTLP/HTTP to a collector on loopback that takes each request; the drain ends when the last span
# is exported), in one run as outboxd, traced, traced, outboxd (a shape run second in a run is
# faster; this order cancels it), ROUNDS rounds. `traced / outboxd` is the ratio of the two
# shapes' mean drain rates within one run.
#
# Environment: EVENTS (200000), ROOMS (500), ROUNDS (2), DATABASES (default "sqlite mariadb
# postgres"), and those of bench/lib.sh.
set -euo pipefail
DATABASES=${DATABASES:-sqlite mariadb postgres}
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-200000}
ROOMS=${ROOMS:-500}
ROUNDS=${ROUNDS:-2}

header "tracing: $EVENTS events over $ROOMS rooms, tracing off and on"
: > "$WORK/summary"
for db in $DATABASES; do
  for round in $(seq "$ROUNDS"); do
    shapes=outboxd,traced,traced,outboxd
    fresh_db "$db" "outboxd_bench_trace_$$"
    section "$db round $round: outboxd-bench --events $EVENTS --rooms $ROOMS --shapes $shapes"
    bench --events "$EVENTS" --rooms "$ROOMS" --shapes "$shapes" "${PLUGIN_ARGS[@]}" \
      --table trace_bench | tee "$WORK/out"
    awk -v db="$db" -v round="$round" '/^traced \/ outboxd/ {
      printf "%-9s round %-3s %s\n", db, round, $0 }' "$WORK/out" >> "$WORK/summary"
  done
done

echo
echo "== summary (drain rate with tracing on over tracing off, within one run)"
cat "$WORK/summary"
