# bench/lib.sh: what the bench/*.sh scripts share. Sourced by them, not run on its own.
#
# Environment (every script):
#   OUTBOXD_BENCH    the benchmark binary (default: target/release/outboxd-bench of this
#                    checkout; build it with `cargo build --release --bin outboxd-bench`)
#   OUTBOXD          the outboxd binary, for the scripts that migrate or run it (default:
#                    target/release/outboxd; `cargo build --release --bin outboxd`)
#   PLUGIN           the publisher plugin (default: plugins/out/chaos.wasm, answering `ok` to every
#                    event with `quiet=true`; build it with `make rust-plugins`)
#   MYSQL_SERVER     a MariaDB/MySQL server, URL without a database
#                    (default: mysql://root@127.0.0.1:3306)
#   POSTGRES_SERVER  a PostgreSQL server, URL without a database
#                    (default: postgres://postgres@127.0.0.1:5432)
#   DATABASES        which databases to measure, in order (default: "sqlite mariadb postgres")
#   RUST_LOG         passed on (default: warn,sqlx::query=error: no slow-statement warnings)
#
# Each script makes its own databases (SQLite: files in a temporary directory) and drops them
# when it exits, whether it succeeded or not. It needs the `mariadb` and `psql` clients.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The binaries and the plugin as absolute paths (given ones relative to the caller's directory).
if [ -n "${OUTBOXD_BENCH:-}" ]; then OUTBOXD_BENCH=$(realpath "$OUTBOXD_BENCH"); else OUTBOXD_BENCH=$REPO/target/release/outboxd-bench; fi
if [ -n "${OUTBOXD:-}" ]; then OUTBOXD=$(realpath "$OUTBOXD"); else OUTBOXD=$REPO/target/release/outboxd; fi
if [ -n "${PLUGIN:-}" ]; then PLUGIN=$(realpath "$PLUGIN"); else PLUGIN=$REPO/plugins/out/chaos.wasm; fi
MYSQL_SERVER=${MYSQL_SERVER:-mysql://root@127.0.0.1:3306}
POSTGRES_SERVER=${POSTGRES_SERVER:-postgres://postgres@127.0.0.1:5432}
DATABASES=${DATABASES:-sqlite mariadb postgres}
export RUST_LOG=${RUST_LOG:-warn,sqlx::query=error}
# No admin endpoint: two runs (or a running host) must not fight over its port.
export OUTBOXD_ADMIN_LISTEN=

[ -x "$OUTBOXD_BENCH" ] || { echo "no binary at $OUTBOXD_BENCH: cargo build --release --bin outboxd-bench (or set OUTBOXD_BENCH)" >&2; exit 1; }
[ -x "$OUTBOXD" ] || { echo "no binary at $OUTBOXD: cargo build --release --bin outboxd (or set OUTBOXD)" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN: make rust-plugins (or set PLUGIN)" >&2; exit 1; }
# The no-op publisher every delivery of these scripts goes through.
PLUGIN_ARGS=(--plugin "$PLUGIN" --plugin-config quiet=true)

# Scratch space, and what runs on exit: CLEANUP's commands, last registered first.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/outboxd-bench.XXXXXX")
CLEANUP=()
on_exit() {
  local i
  for ((i = ${#CLEANUP[@]} - 1; i >= 0; i--)); do eval "${CLEANUP[i]}" || true; done
  rm -rf "$WORK"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
# Run from the scratch directory, so that no ./outboxd.toml changes the configuration measured.
cd "$WORK"

# my_sql SERVER_URL SQL: run SQL on a MariaDB/MySQL server given as mysql://USER[:PASS]@HOST[:PORT].
my_sql() {
  local rest=${1#*://} user host port pass=
  user=${rest%%@*}; rest=${rest#*@}; rest=${rest%%/*}
  if [[ $user == *:* ]]; then pass=${user#*:}; user=${user%%:*}; fi
  host=${rest%%:*}; port=3306; [[ $rest == *:* ]] && port=${rest#*:}
  MYSQL_PWD=$pass mariadb --no-defaults -h"$host" -P"$port" -u"$user" -N -e "$2"
}

# pg_sql SERVER_URL SQL: run SQL on a PostgreSQL server (connected to its `postgres` database).
pg_sql() {
  PGOPTIONS=--client-min-messages=warning psql -qAt "$1/postgres" -c "$2"
}

# fresh_db BACKEND NAME: an empty database NAME on BACKEND (sqlite, mariadb, postgres), dropped on
# exit; sets URL to it.
fresh_db() {
  case $1 in
    sqlite)
      rm -f "$WORK/$2.db"*
      URL="sqlite://$WORK/$2.db?mode=rwc" ;;
    mariadb)
      my_sql "$MYSQL_SERVER" "DROP DATABASE IF EXISTS $2; CREATE DATABASE $2"
      CLEANUP+=("my_sql '$MYSQL_SERVER' 'DROP DATABASE IF EXISTS $2'")
      URL=$MYSQL_SERVER/$2 ;;
    postgres)
      pg_sql "$POSTGRES_SERVER" "DROP DATABASE IF EXISTS $2"
      pg_sql "$POSTGRES_SERVER" "CREATE DATABASE $2"
      CLEANUP+=("pg_sql '$POSTGRES_SERVER' 'DROP DATABASE IF EXISTS $2 WITH (FORCE)'")
      URL=$POSTGRES_SERVER/$2 ;;
    *) echo "unknown database $1 (sqlite, mariadb, postgres)" >&2; exit 1 ;;
  esac
}

# bench ARGS...: `outboxd-bench` on $URL.
bench() {
  "$OUTBOXD_BENCH" --database-url "$URL" "$@"
}

# port_open PORT: whether something listens on 127.0.0.1:PORT.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# require_free_port PORT VAR: exits unless PORT (the value of the environment variable VAR) is free.
require_free_port() {
  if port_open "$1"; then
    echo "port $1 is taken: set $2 to a free one" >&2; exit 1
  fi
}

# header TITLE: what was measured with what, for the record.
header() {
  local commit
  commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if ! git -C "$REPO" diff --quiet HEAD -- host migrations 2>/dev/null; then commit="$commit (host/ or migrations/ changed since)"; fi
  echo "== $1"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')  commit: $commit"
  echo "binaries: $OUTBOXD_BENCH (file time $(date -u -r "$OUTBOXD_BENCH" '+%Y-%m-%d %H:%M UTC')), $OUTBOXD (file time $(date -u -r "$OUTBOXD" '+%Y-%m-%d %H:%M UTC'))"
  echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# section TEXT: a heading between runs, with the load average at that moment.
section() {
  echo
  echo "-- $1 (load $(cut -d' ' -f1 /proc/loadavg))"
}
