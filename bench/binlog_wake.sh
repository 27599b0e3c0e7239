#!/usr/bin/env bash
# bench/binlog_wake.sh: quiet rooms on MariaDB, the binlog follower against the idle probe, on one
# private server with a binlog (docs/PERFORMANCE.md, "Current figures", MariaDB).
#
# Starts a private MariaDB (its own datadir and socket under a temporary directory, port
# BINLOG_PORT, `--log-bin --binlog-format=ROW --server-id=1`, otherwise default settings), stopped
# and removed on exit; the shared servers are not touched. Then, ROUNDS times, alternating
# `OUTBOXD_WORKER_WAKE=binlog` (follow the binlog) and `=probe` (the bounded idle probe, every
# `worker.idle_probe` = 50 ms), default config otherwise, chaos plugin answering `ok`:
#   - sparse: one row every 2 s for SPARSE_SECS seconds after 2 s of quiet, every row counted;
#   - burst: 2,000 rows/s from 8 producers for 2 s after QUIET of quiet, every row counted.
# Prints commit → delivered p50/p90/p99, the claims the worker ran (the idle cost) and the busiest
# second of the machine's CPUs during the run (all processes: the producers' commits included).
#
# Environment: BINLOG_PORT (3417), ROUNDS (1), SPARSE_SECS (30), QUIET (30s), and those of
# bench/lib.sh (MYSQL_SERVER is not used). Needs mariadb-install-db and mariadbd. ~4 minutes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
BINLOG_PORT=${BINLOG_PORT:-3417}
ROUNDS=${ROUNDS:-1}
SPARSE_SECS=${SPARSE_SECS:-30}
QUIET=${QUIET:-30s}

require_free_port "$BINLOG_PORT" BINLOG_PORT

header "MariaDB wake: binlog against probe, private server on port $BINLOG_PORT"

# The private server, with a tmpdir of its own: a starting mariadbd deletes every #sql* file of
# its tmpdir, and in /tmp those are the shared MariaDB's open temporary tables.
DATADIR=$WORK/mariadb
SOCKET=$WORK/mariadb.sock
mkdir -p "$WORK/mariadb-tmp"
TMPDIR=$WORK/mariadb-tmp mariadb-install-db --no-defaults --datadir="$DATADIR" --auth-root-authentication-method=normal \
  --skip-test-db --user="$(id -un)" > "$WORK/install.log" 2>&1
mariadbd --no-defaults --datadir="$DATADIR" --tmpdir="$WORK/mariadb-tmp" --port="$BINLOG_PORT" --socket="$SOCKET" \
  --bind-address=127.0.0.1 --log-bin=binlog --binlog-format=ROW --server-id=1 \
  --innodb-buffer-pool-size=256M --user="$(id -un)" > "$WORK/mariadbd.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  mariadb-admin --no-defaults --socket="$SOCKET" -uroot shutdown 2>/dev/null || kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}
CLEANUP+=(stop_server)
for _ in $(seq 1 120); do
  mariadb-admin --no-defaults --socket="$SOCKET" -uroot ping >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/mariadbd.log" >&2; exit 1; }
  sleep 0.5
done
mariadb --no-defaults --socket="$SOCKET" -uroot -e 'CREATE DATABASE wake'
echo "private server: $(mariadb --no-defaults --socket="$SOCKET" -uroot -N -e 'SELECT VERSION(), @@log_bin, @@binlog_format')"
URL=mysql://root@127.0.0.1:$BINLOG_PORT/wake

: > "$WORK/summary"
# run WAKE LABEL TABLE ARGS...: one latency run with worker.wake = WAKE; figures to the summary.
run() {
  local wake=$1 label=$2 table=$3; shift 3
  section "wake=$wake, $label: outboxd-bench $*"
  busy_seconds > "$WORK/busy" &
  local sampler=$!
  OUTBOXD_WORKER_WAKE=$wake bench "$@" "${PLUGIN_ARGS[@]}" --table "$table" | tee "$WORK/out"
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  awk -v wake="$wake" -v label="$label" -v busy="$(sort -n "$WORK/busy" | tail -1)" '
    /^ *rate +events +counted/ { getline; row = $0 }
    /^claims: / { claims = $2 }
    END { split(row, f); printf "%-7s %-22s %8s %8s %8s %8s %8s %8s %7s %8s\n",
            wake, label, f[3], f[4], f[5], f[6], f[7], f[8], claims, busy "%" }' "$WORK/out" >> "$WORK/summary"
}

# busy_seconds: every second until killed, the share of the machine's CPU time that was busy in
# that second (/proc/stat: all but idle and iowait), in percent.
busy_seconds() {
  local prev now
  ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; }
  prev=$(ticks)
  while sleep 1; do
    now=$(ticks)
    echo "$prev $now" | awk '{ b = $3 - $1; i = $4 - $2; if (b + i > 0) printf "%d\n", 100 * b / (b + i) }'
    prev=$now
  done
}

for i in $(seq 1 "$ROUNDS"); do
  for wake in binlog probe; do
    run "$wake" "sparse 1 row / 2 s" "sparse_${wake}_$i" --every 2s --seconds "$SPARSE_SECS" --quiet-first 2s
  done
  for wake in binlog probe; do
    run "$wake" "burst 2000/s after $QUIET" "burst_${wake}_$i" --rate 2000 --seconds 2 --quiet-first "$QUIET" --producers 8
  done
done

echo
echo "== summary (commit → delivered, ms; private MariaDB with a binlog)"
printf "%-7s %-22s %8s %8s %8s %8s %8s %8s %7s %8s\n" wake load counted "actual/s" p50 p90 p99 max claims "max cpu"
cat "$WORK/summary"
