#!/usr/bin/env bash
# What `make test` needs beyond a Rust toolchain: for each thing, whether this machine has it,
# which tests need it and how to get it. Outside CI a missing thing only skips its tests (each
# prints SKIPPED), so this exits 0; with CI set every test is required and a missing thing fails.
#
#   tests/scripts/requirements.sh          (the first step of `make test`)
set -uo pipefail

missing=0
# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# have WHAT TESTS HOW CHECK…: one line per requirement.
have() {
  local what=$1 tests=$2 how=$3; shift 3
  if "$@" >/dev/null 2>&1; then
    printf '  ok       %s\n' "$what"
  else
    missing=1
    printf '  MISSING  %s\n           needed by: %s\n           get it:    %s\n' "$what" "$tests" "$how"
  fi
}
url_or_port() { [ -n "${!1:-}" ] || port_open "$2"; }

echo "requirements of make test:"
have "MariaDB on 127.0.0.1:3306 (or OUTBOXD_TEST_MYSQL_URL)" "every mysql:: test" \
  "apt-get install mariadb-server (root, no password; database test)" url_or_port OUTBOXD_TEST_MYSQL_URL 3306
have "PostgreSQL on 127.0.0.1:5432 (or OUTBOXD_TEST_POSTGRES_URL)" "every postgres:: test, brokers" \
  "apt-get install postgresql (user postgres, trust)" url_or_port OUTBOXD_TEST_POSTGRES_URL 5432
have "mariadbd and initdb binaries" "kill_chaos, binlog_wake (private servers)" \
  "apt-get install mariadb-server postgresql" bash -c 'command -v mariadbd || [ -x /usr/sbin/mariadbd ]; ls /usr/lib/postgresql/*/bin/initdb'
for broker in "Redis 6379 redis-server" "RabbitMQ 5672 rabbitmq-server" "Mosquitto 1883 mosquitto" \
  "NATS-with-JetStream 4222 nats-server"; do
  set -- $broker
  have "$1 on 127.0.0.1:$2" "brokers" "apt-get install $3, started as in .ci/run" port_open "$2"
done
have "a Kafka-protocol broker on 127.0.0.1:9092" "brokers (Kafka)" \
  "make kafka-broker, then start .toolchains/kafka/tansu as .ci/run does" port_open 9092
have "Chromium and chromedriver (/usr/bin)" "console browser::" \
  "make browser (as root: Debian's chromium and chromium-driver)" \
  test -x /usr/bin/chromium -a -x /usr/bin/chromedriver
have "Go (golang-go with the Debian SQL drivers)" "test-producers-go, demo-producers" \
  "as root, bash producers/go/test.sh installs them (Debian packages)" command -v go
have "Node.js 20+ with npm" "the JavaScript plugins, test-producers-node" "apt-get install nodejs npm" \
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'
have "Python 3.11+ with venv" "the Python plugins, test-producers-python" "apt-get install python3-venv" \
  python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))'
have "cargo-nextest" "test-host (runs the host's tests)" "cargo install cargo-nextest --locked" \
  cargo nextest --version

if [ "$missing" = 0 ]; then
  echo "all there: no test skips."
elif [ -n "${CI:-}" ]; then
  echo "CI is set: every test is required, so the missing ones above fail the run."
  exit 1
else
  echo "tests needing what is missing print SKIPPED and pass; with CI set they fail."
fi
