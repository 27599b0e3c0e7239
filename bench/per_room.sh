#!/usr/bin/env bash
# bench/per_room.sh: what per-room ordering costs, shallow and deep backlogs
# (docs/operate/per-room.md, "What it costs").
#
# Per database, one `outboxd-bench` run per backlog shape on a fresh table,
# every event through the chaos plugin answering `ok`, shapes raw (the plain SQL loop), outboxd
# (unordered) and per-room (`worker.ordering = "per-room"`), side by side:
#   - shallow: EVENTS events over EVENTS/50 rooms (50 per room, the throughput bench's shape);
#   - deep: EVENTS events over DEEP_ROOMS rooms (EVENTS/DEEP_ROOMS per room: a backlog whose rooms
#     each hold many events in one partition, as after an outage).
# `vs raw` is the shape's drain rate over the raw loop's in the same run.
#
# Environment: EVENTS (50000), DEEP_ROOMS (25), and those of bench/lib.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-50000}
DEEP_ROOMS=${DEEP_ROOMS:-25}

header "per-room ordering: $EVENTS events per shape"
: > "$WORK/summary"

# run DB LABEL ARGS...: one bench run; its shape lines go to the summary.
run() {
  local db=$1 label=$2; shift 2
  section "$db, $label: outboxd-bench $*"
  bench "$@" | tee "$WORK/out"
  awk -v db="$db" -v label="$label" '$1 ~ /^(raw|outboxd|per-room)$/ {
    printf "%-9s %-24s %-8s %11s %8s\n", db, label, $1, $7, $8 }' "$WORK/out" >> "$WORK/summary"
}

for db in $DATABASES; do
  fresh_db "$db" "outboxd_bench_room_$$"
  run "$db" "shallow: $((EVENTS / 50)) rooms" --events "$EVENTS" --rooms $((EVENTS / 50)) \
    --shapes raw,outboxd,per-room "${PLUGIN_ARGS[@]}" --table room_shallow
  run "$db" "deep: $DEEP_ROOMS rooms" --events "$EVENTS" --rooms "$DEEP_ROOMS" \
    --shapes raw,outboxd,per-room "${PLUGIN_ARGS[@]}" --table room_deep
done

echo
echo "== summary (drain events/s; ratios within one run)"
printf "%-9s %-24s %-8s %11s %8s\n" database run shape "drain ev/s" "vs raw"
cat "$WORK/summary"
