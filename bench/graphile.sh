#!/usr/bin/env bash
# bench/graphile.sh: outboxd's default config against graphile-worker, the PostgreSQL job queue
# that claims the same way (FOR UPDATE SKIP LOCKED), draining the same backlog side by side on the
# same PostgreSQL (issue 25's peer; docs/PERFORMANCE.md, "Against graphile-worker").
#
# For ROUNDS rounds, on a fresh database each round (outboxd first on odd rounds, graphile-worker
# first on even ones, so neither always goes first):
#   - outboxd: `outboxd-bench --events EVENTS --shapes raw-1idx,outboxd` through the chaos plugin:
#     the default config (batch 1000, 1 loop, partitions), and the raw two-write SQL loop on a table
#     with only the primary key and one claim index (the yardstick `vs 1idx`);
#   - graphile-worker (bench/graphile/drain.mjs): EVENTS jobs added, then worker processes with a
#     no-op task timed from the start of their runners until the job table is empty, once per
#     configuration of GRAPHILE_CONFIGS (CONCURRENCY:LOCAL_QUEUE:PROCESSES; LOCAL_QUEUE > 1 turns on
#     its batched fetch and completion, PROCESSES = 2 uses both cores). Its best configuration of
#     the round is the peer.
# Both drains are timed the same way: from the start of the delivery loop, the backlog already
# committed, until every event is delivered (outboxd) or every job is gone (graphile-worker).
#
# graphile-worker 0.17.3 (bench/graphile/package-lock.json, the newest that runs on Node 20) is
# installed from npm into target/bench-graphile on first use; needs `node` and `npm`.
# Environment: ROUNDS (3), EVENTS (50000), GRAPHILE_CONFIGS ("100:1000:1 100:1000:2 24:500:2
# 200:2000:2"; graphile-worker's unbatched shape, e.g. 4:0:2, drains ~1,700 jobs/s here), and those
# of bench/lib.sh (POSTGRES_SERVER). ~1 minute a round.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
EVENTS=${EVENTS:-50000}
GRAPHILE_CONFIGS=${GRAPHILE_CONFIGS:-100:1000:1 100:1000:2 24:500:2 200:2000:2}

command -v node >/dev/null && command -v npm >/dev/null || { echo "graphile-worker needs node and npm" >&2; exit 1; }
PEER=$REPO/target/bench-graphile
if ! cmp -s "$REPO/bench/graphile/package-lock.json" "$PEER/package-lock.json" 2>/dev/null ||
  [ ! -d "$PEER/node_modules/graphile-worker" ]; then
  mkdir -p "$PEER"
  cp "$REPO/bench/graphile/package.json" "$REPO/bench/graphile/package-lock.json" "$PEER/"
  (cd "$PEER" && npm ci --no-audit --no-fund --loglevel=error)
fi
cp "$REPO/bench/graphile/drain.mjs" "$PEER/"

header "outboxd against graphile-worker $(node -p "require('$PEER/node_modules/graphile-worker/package.json').version") (node $(node --version)): $EVENTS events, PostgreSQL"

# outboxd_run ROUND: outboxd's default drain and raw-1idx; appends "ROUND outboxd EV/S RAW1IDX_EV/S"
# to $WORK/outboxd.
outboxd_run() {
  section "round $1, outboxd-bench --events $EVENTS --shapes raw-1idx,outboxd"
  bench --events "$EVENTS" --shapes raw-1idx,outboxd "${PLUGIN_ARGS[@]}" --table "gw_$1" | tee "$WORK/out"
  awk -v r="$1" '$1 == "raw-1idx" { raw = $7 } $1 == "outboxd" { ob = $7 }
    END { print r, "outboxd", ob, raw }' "$WORK/out" >> "$WORK/outboxd"
}

# graphile_run ROUND: each configuration of GRAPHILE_CONFIGS on a fresh graphile_worker schema;
# appends "ROUND CONCURRENCY:LOCAL_QUEUE:PROCESSES JOBS/S" to $WORK/graphile.
graphile_run() {
  local cfg conc queue procs
  for cfg in $GRAPHILE_CONFIGS; do
    IFS=: read -r conc queue procs <<< "$cfg"
    section "round $1, graphile-worker: concurrency $conc, local queue $queue, $procs processes"
    PGOPTIONS=--client-min-messages=warning psql -qAt "$URL" -c "DROP SCHEMA IF EXISTS graphile_worker CASCADE"
    (cd "$PEER" && node drain.mjs "$URL" "$EVENTS" "$conc" "$queue" "${procs:-1}") | tee "$WORK/out"
    awk -v r="$1" '$1 == "graphile-worker" { print r, $3 ":" $4 ":" $5, $7 }' "$WORK/out" >> "$WORK/graphile"
  done
}

: > "$WORK/outboxd"; : > "$WORK/graphile"
for round in $(seq 1 "$ROUNDS"); do
  fresh_db postgres "outboxd_bench_gw_$$_$round"
  if ((round % 2)); then outboxd_run "$round"; graphile_run "$round"; else graphile_run "$round"; outboxd_run "$round"; fi
done

echo
echo "== summary (drain events/s; ratios within one round)"
printf "%5s %11s %11s %11s %-13s %13s %9s\n" round outboxd raw-1idx graphile "(best cfg)" "outboxd/graph" "vs 1idx"
while read -r round _ ob raw; do
  read -r best cfg < <(awk -v r="$round" '$1 == r { print $3, $2 }' "$WORK/graphile" | sort -rn | head -1)
  awk -v r="$round" -v ob="$ob" -v raw="$raw" -v g="$best" -v cfg="$cfg" 'BEGIN {
    printf "%5s %11d %11d %11d %-13s %12.2fx %8.2fx\n", r, ob, raw, g, "(" cfg ")", ob / g, ob / raw }'
done < "$WORK/outboxd"
echo
echo "graphile-worker per configuration (concurrency:local queue:processes, jobs/s):"
awk '{ printf "  round %s  %-12s %8d\n", $1, $2, $3 }' "$WORK/graphile"
