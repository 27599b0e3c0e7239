#!/usr/bin/env bash
# The Go producer library's tests: unit tests (library module), end-to-end tests against SQLite,
# MariaDB and PostgreSQL with the real host (e2e module), and a build of the example.
#
#   producers/go/test.sh            # from anywhere; after `make build` made target/debug/outboxd
#   OUTBOXD_BIN=path/to/outboxd producers/go/test.sh
#
# Installs Go and the database drivers from Debian packages when missing (no Go module proxy is
# needed: the e2e and example modules point at /usr/share/gocode/src with replace directives).
# The end-to-end tests use MariaDB on 127.0.0.1:3306 (root, no password) and PostgreSQL on
# 127.0.0.1:5432 (postgres, trust); a server that does not answer fails the test when CI is set
# and skips it (loudly) otherwise.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

packages=(golang-go gcc libsqlite3-dev golang-github-go-sql-driver-mysql-dev golang-github-lib-pq-dev
          golang-github-mattn-go-sqlite3-dev)
gocode=/usr/share/gocode/src/github.com
missing=0
command -v go >/dev/null 2>&1 || missing=1
command -v gcc >/dev/null 2>&1 || missing=1
for dir in go-sql-driver/mysql lib/pq mattn/go-sqlite3; do
    [ -f "$gocode/$dir/go.mod" ] || missing=1
done
if [ "$missing" = 1 ] && [ "$(id -u)" != 0 ]; then
    # Debian's packages need root: say what is missing and how to get it, and fail only in CI.
    echo "test.sh: Go and its database drivers are missing: as root, run this script once," \
        "or apt-get install ${packages[*]}"
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "test.sh: SKIPPED producers/go (no Go toolchain)"
    exit 0
fi
if [ "$missing" = 1 ]; then
    echo "test.sh: installing ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq "${packages[@]}" >/dev/null; then
        apt-get update -qq
        apt-get install -y -qq "${packages[@]}" >/dev/null
    fi
fi

# Offline, local toolchain, cgo for the SQLite driver.
export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=1
if [ -z "${HOME:-}" ]; then export HOME=/tmp/outboxd-go-home; fi
# The tests run in producers/go/e2e: a relative OUTBOXD_BIN is relative to the caller's directory.
if [ -n "${OUTBOXD_BIN:-}" ] && [ "${OUTBOXD_BIN#/}" = "$OUTBOXD_BIN" ]; then
    export OUTBOXD_BIN="$PWD/$OUTBOXD_BIN"
fi
echo "test.sh: $(go version); host ${OUTBOXD_BIN:-$repo/target/debug/outboxd}"

status=0
step() {
    local dir="$1"; shift
    echo "--- producers/go${dir#"$here"}: $*"
    (cd "$dir" && "$@") || status=1
}
step "$here" go vet ./...
step "$here" go test -count=1 ./...
step "$here/example" go vet ./...
step "$here/example" go build -o /dev/null .
step "$here/e2e" go vet ./...
step "$here/e2e" go test -count=1 -timeout 15m -v ./...
if [ "$status" = 0 ]; then echo "test.sh: producers/go: all passed"; else echo "test.sh: producers/go: FAILED"; fi
exit "$status"
