#!/usr/bin/env bash
# bench/throughput.sh: how fast a backlog drains, outboxd against plain SQL loops, side by side in
# one `outboxd-bench` run per database
# (docs/PERFORMANCE.md, "Current figures").
#
# Per database, on a fresh database (SQLite: a fresh file), every event through the chaos plugin
# answering `ok`, default config (batch 1000, 1 loop): shapes raw, raw-1idx, raw-held, outboxd,
# per-room side by side in one run. Each shape enqueues EVENTS events on its own app code and
# drains them; `vs raw` is its drain rate over raw's in the same run, `vs 1idx` over raw-1idx's,
# the same raw loop on a table with only the primary key and one claim index (the yardstick that
# does not move when outboxd's own indexes change). The raw loop: 2 clients, batch 500, claim
# with FOR UPDATE SKIP LOCKED then one fenced mark (two writes per row); raw-held locks, marks
# delivered and commits in one transaction (one write per row, not at-least-once safe).
#
# Environment: EVENTS (50000), and those of bench/lib.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-50000}

header "throughput: $EVENTS events per shape"
: > "$WORK/summary"

# run DB LABEL ARGS...: one bench run; its shape lines go to the summary.
run() {
  local db=$1 label=$2; shift 2
  section "$db, $label: outboxd-bench $*"
  bench "$@" | tee "$WORK/out"
  awk -v db="$db" -v label="$label" '$1 ~ /^(raw|raw-1idx|raw-held|outboxd|per-room)$/ {
    printf "%-9s %-9s %-8s %6s %7s %11s %8s %8s\n", db, label, $1, $2, $3, $7, $8, $9 }' \
    "$WORK/out" >> "$WORK/summary"
}

for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_thru_$$"
  run "$db" default --events "$EVENTS" --shapes raw,raw-1idx,raw-held,outboxd,per-room \
    "${PLUGIN_ARGS[@]}" --table thru_default
done

echo
echo "== summary (drain events/s; ratios within one run)"
printf "%-9s %-9s %-8s %6s %7s %11s %8s %8s\n" database run shape batch loops "drain ev/s" "vs raw" "vs 1idx"
cat "$WORK/summary"
