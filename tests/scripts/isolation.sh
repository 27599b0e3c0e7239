#!/usr/bin/env bash
# `make isolation`: issue 19's checks through `outboxd run --drain` on each database (SQLite file,
# MariaDB/MySQL and PostgreSQL on this machine's default servers, a fresh database each), with
# the built plugins and the default limits:
#   1. one poison event (its plugin traps whenever it is in the call) among 1000;
#   2. 1000 valid events of 120 KB each through the log plugin;
#   3. 300 events to the log plugin beside 5 to a guest that spins without host calls until its
#      3 s deadline, in one claim: how long before that deadline the log rows were marked.
# Prints one line per check and database. Needs `make build` (binary and plugins), and the
# sqlite3, mariadb and psql clients.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTBOXD=${OUTBOXD:-target/debug/outboxd}
PLUGINS=$PWD/plugins/out
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MYSQL_SERVER=${MYSQL_SERVER:-mysql://root@127.0.0.1:3306}
POSTGRES_SERVER=${POSTGRES_SERVER:-postgres://postgres@127.0.0.1:5432}

# fresh_url BACKEND NAME: a new, empty database's URL.
fresh_url() {
  case $1 in
    sqlite) echo "sqlite://$WORK/$2.db" ;;
    mysql)
      mariadb -h127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS $2; CREATE DATABASE $2"
      echo "$MYSQL_SERVER/$2" ;;
    postgres)
      PGOPTIONS=--client-min-messages=warning psql -q -h127.0.0.1 -Upostgres -c "DROP DATABASE IF EXISTS $2" -c "CREATE DATABASE $2"
      echo "$POSTGRES_SERVER/$2" ;;
  esac
}

# sql BACKEND URL QUERY: one value.
sql() {
  case $1 in
    sqlite) sqlite3 "${2#sqlite://}" "$3" ;;
    mysql) mariadb -h127.0.0.1 -uroot -N -e "$3" "${2##*/}" ;;
    postgres) psql -h127.0.0.1 -Upostgres -At -c "$3" "${2##*/}" ;;
  esac
}

# config FILE SINKS ROUTES [RETRY]: a config with these [[sink]]/[[route]] sections.
config() {
  printf '[admin]\nlisten = ""\n[log]\nsummary_interval = "0s"\n%s\n%s\n%s\n' "$4" "$2" "$3" > "$1"
}

for backend in sqlite mysql postgres; do
  # 1. One poison among 1000.
  url=$(fresh_url $backend outboxd_iso_poison)
  cfg=$WORK/poison.toml
  config "$cfg" "[[sink]]
name = \"trapping\"
plugin = \"$PLUGINS/chaos.wasm\"
config = { trap_on_type = \"Poison\", quiet = \"true\" }" '[[route]]
event_type = "*"
sink = "trapping"' '[retry]
strategy = "fixed_interval"
interval = "10ms"
max_attempts = 3'
  export OUTBOXD_DATABASE_URL=$url
  $OUTBOXD --config "$cfg" migrate >/dev/null 2>&1
  $OUTBOXD --config "$cfg" enqueue --room r1 --type RoomGiftSent --count 500 >/dev/null
  $OUTBOXD --config "$cfg" enqueue --room r2 --type Poison >/dev/null
  $OUTBOXD --config "$cfg" enqueue --room r3 --type RoomGiftSent --count 499 >/dev/null
  summary=$($OUTBOXD --config "$cfg" run --drain 2>&1 | grep -o 'claimed=.*' | tail -1)
  # `run --drain` stops when nothing is claimable: run again while the poison's retry is due.
  for _ in 1 2 3 4 5; do
    [ "$(sql $backend "$url" "SELECT status FROM room_outbox WHERE event_type = 'Poison'")" = failed ] && break
    sleep 0.05
    $OUTBOXD --config "$cfg" run --drain >/dev/null 2>&1
  done
  status=$(sql $backend "$url" "SELECT status FROM room_outbox WHERE event_type = 'Poison'")
  attempts=$(sql $backend "$url" "SELECT retry_count FROM room_outbox WHERE event_type = 'Poison'")
  delivered=$(sql $backend "$url" "SELECT count(*) FROM room_outbox WHERE status = 'delivered'")
  echo "$backend poison: first run $summary; in the end $delivered delivered, the poison $status after $attempts attempts"

  # 2. 1000 events of 120 KB through the log plugin, default limits.
  url=$(fresh_url $backend outboxd_iso_large)
  cfg=$WORK/large.toml
  config "$cfg" "[[sink]]
name = \"log\"
plugin = \"$PLUGINS/log.wasm\"
limits = { log_lines_per_second = 1000000 }" '[[route]]
event_type = "*"
sink = "log"' ''
  export OUTBOXD_DATABASE_URL=$url
  $OUTBOXD --config "$cfg" migrate >/dev/null 2>&1
  body="\"$(head -c 122880 /dev/zero | tr '\0' 'g')\""
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    $OUTBOXD --config "$cfg" enqueue --room r1 --type RoomGiftSent --count 100 --body-json "$body" >/dev/null
  done
  summary=$($OUTBOXD --config "$cfg" run --drain 2>&1 | grep -o 'claimed=.*' | tail -1)
  echo "$backend 1000 x 120 KB: $summary"

  # 3. The log sink beside a guest spinning until its 3 s deadline.
  url=$(fresh_url $backend outboxd_iso_spin)
  cfg=$WORK/spin.toml
  config "$cfg" "[[sink]]
name = \"log\"
plugin = \"$PLUGINS/log.wasm\"
limits = { log_lines_per_second = 1000000 }
[[sink]]
name = \"spin\"
plugin = \"$PLUGINS/chaos.wasm\"
config = { behaviour = \"loop\", quiet = \"true\" }
limits = { publish_timeout = \"3s\" }
breaker = { failures = 0 }" '[[route]]
event_type = "Spin*"
sink = "spin"
[[route]]
event_type = "*"
sink = "log"' ''
  export OUTBOXD_DATABASE_URL=$url
  $OUTBOXD --config "$cfg" migrate >/dev/null 2>&1
  $OUTBOXD --config "$cfg" enqueue --room r1 --type RoomGiftSent --count 300 >/dev/null
  $OUTBOXD --config "$cfg" enqueue --room r2 --type SpinA --count 5 >/dev/null
  $OUTBOXD --config "$cfg" run --drain > "$WORK/spin.log" 2>&1
  started=$(grep -m1 'worker started' "$WORK/spin.log" | cut -d' ' -f1)
  started_ms=$(( $(date -d "$started" +%s%N) / 1000000 ))
  marked=$(sql $backend "$url" "SELECT max(updated_at_ms) FROM room_outbox WHERE event_type = 'RoomGiftSent' AND status = 'delivered'")
  delivered=$(sql $backend "$url" "SELECT count(*) FROM room_outbox WHERE event_type = 'RoomGiftSent' AND status = 'delivered'")
  echo "$backend spinning neighbour: $delivered log rows delivered, all marked $((marked - started_ms)) ms after the worker started (the spinning guest's deadline: 3000 ms)"
  unset OUTBOXD_DATABASE_URL
done
