#!/usr/bin/env bash
# bench/throughput.sh: how fast a backlog drains, outboxd against a plain SQL loop and against the
# Go version's shape, side by side in one `outboxd-bench` run per database
# (docs/PERFORMANCE.md, "Current figures").
#
# Per database, on a fresh database (SQLite: a fresh file), every event through the chaos plugin
# answering `ok`:
#   1. default config (batch 1000, 1 loop, leased): shapes raw, raw-1idx, outboxd, held, go
#      (SQLite: no held; held mode needs row locks, which SQLite does not have);
#   2. held mode tuned (batch TUNED_BATCH, TUNED_WORKERS loops): shapes raw, raw-1idx, held (not
#      SQLite);
#   3. per-room ordering, on a table of its own with the room index it needs: shapes raw, outboxd,
#      per-room (the room index slows every shape of that table, so it is not in run 1).
# Each shape enqueues EVENTS events on its own app code and drains them; `vs raw` and `vs go` are
# its drain rate over that shape's in the same run; `vs 1idx` over raw-1idx, the same raw loop on a
# table with only the primary key and one claim index (the yardstick that does not move when
# outboxd's own indexes change). The raw loop: 2 clients, batch 500, claim with FOR UPDATE SKIP
# LOCKED then one fenced mark (two writes per row, as outboxd's leased default).
#
# Environment: EVENTS (50000), TUNED_BATCH (2000), TUNED_WORKERS (2), and those of bench/lib.sh.
# Takes ~7 minutes for the three databases on 2 busy cores (the Go shape is most of it).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-50000}
TUNED_BATCH=${TUNED_BATCH:-2000}
TUNED_WORKERS=${TUNED_WORKERS:-2}

header "throughput: $EVENTS events per shape"
: > "$WORK/summary"

# run DB LABEL ARGS...: one bench run; its shape lines go to the summary.
run() {
  local db=$1 label=$2; shift 2
  section "$db, $label: outboxd-bench $*"
  bench "$@" | tee "$WORK/out"
  awk -v db="$db" -v label="$label" '$1 ~ /^(raw|raw-1idx|raw-held|outboxd|held|go|per-room)$/ {
    printf "%-9s %-18s %-8s %6s %7s %11s %8s %8s %8s\n", db, label, $1, $2, $3, $7, $9, $10, $8 }' \
    "$WORK/out" >> "$WORK/summary"
}

for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_thru_$$"
  if [ "$db" = sqlite ]; then
    run "$db" default --events "$EVENTS" --shapes raw,raw-1idx,outboxd,go "${PLUGIN_ARGS[@]}" --table thru_default
  else
    run "$db" default --events "$EVENTS" --shapes raw,raw-1idx,outboxd,held,go "${PLUGIN_ARGS[@]}" --table thru_default
    run "$db" "held $TUNED_BATCH x $TUNED_WORKERS" --events "$EVENTS" --batch-size "$TUNED_BATCH" \
      --workers "$TUNED_WORKERS" --shapes raw,raw-1idx,held "${PLUGIN_ARGS[@]}" --table thru_held
  fi
  run "$db" "room index" --events "$EVENTS" --shapes raw,outboxd,per-room "${PLUGIN_ARGS[@]}" --table thru_room
done

echo
echo "== summary (drain events/s; ratios within one run)"
printf "%-9s %-18s %-8s %6s %7s %11s %8s %8s %8s\n" database run shape batch loops "drain ev/s" "vs raw" "vs 1idx" "vs go"
cat "$WORK/summary"
