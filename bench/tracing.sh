#!/usr/bin/env bash
# bench/tracing.sh: the cost of tracing (docs/PERFORMANCE.md, "Tracing"). Per database and round,
# EVENTS events over ROOMS rooms through the chaos plugin answering `ok`, default config, drained
# twice, each time alone on a fresh database: the `outboxd` shape (tracing off) and the `traced`
# shape (every span exported over OTLP/HTTP to a collector on loopback that takes each request; the
# drain ends when the last span is exported). The order alternates by round (off first on odd
# rounds), so neither always runs on a machine the other warmed. Per database: each round's
# on / off ratio, and the ratio of the median rates.
#
# Environment: EVENTS (200000), ROOMS (500), ROUNDS (5), DATABASES (default "sqlite mariadb
# postgres"), and those of bench/lib.sh.
set -euo pipefail
DATABASES=${DATABASES:-sqlite mariadb postgres}
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-200000}
ROOMS=${ROOMS:-500}
ROUNDS=${ROUNDS:-5}

header "tracing: $EVENTS events over $ROOMS rooms, tracing off and on, each drain alone"
: > "$WORK/rates"
for db in $DATABASES; do
  for round in $(seq "$ROUNDS"); do
    if (( round % 2 )); then order="outboxd traced"; else order="traced outboxd"; fi
    for shape in $order; do
      fresh_db "$db" "outboxd_bench_trace_$$"
      section "$db round $round: outboxd-bench --events $EVENTS --rooms $ROOMS --shapes $shape"
      bench --events "$EVENTS" --rooms "$ROOMS" --shapes "$shape" "${PLUGIN_ARGS[@]}" \
        --table trace_bench | tee "$WORK/out"
      # The shape's row: its drain rate is the 7th column (ev/s).
      awk -v db="$db" -v round="$round" -v shape="$shape" '$1 == shape && $4 ~ /^[0-9]+$/ {
        print db, round, shape, $7 }' "$WORK/out" >> "$WORK/rates"
      grep '^traced spans:' "$WORK/out" | sed "s/^/$db round $round /" >> "$WORK/spans" || true
    done
  done
done

echo
echo "== summary (drain rate with tracing on over tracing off; each drain alone on a fresh database)"
cat "$WORK/spans" 2>/dev/null || true
python3 - "$WORK/rates" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    db, rnd, shape, rate = line.split()
    rates.setdefault(db, {}).setdefault(int(rnd), {})[shape] = float(rate)
for db, rounds in rates.items():
    pairs = [r for _, r in sorted(rounds.items()) if "outboxd" in r and "traced" in r]
    each = ", ".join(f"{r['traced'] / r['outboxd']:.2f}" for r in pairs)
    off = statistics.median(r["outboxd"] for r in pairs)
    on = statistics.median(r["traced"] for r in pairs)
    print(f"{db:9} off {off:8.0f} ev/s  on {on:8.0f} ev/s  on / off (medians) {on / off:.2f}x"
          f"  (each round: {each})")
PY
