#!/usr/bin/env bash
# Tests of the Python producer library (producers/python): unit tests, the database tests
# (MariaDB 127.0.0.1:3306 root, PostgreSQL 127.0.0.1:5432 postgres) and the end-to-end tests that
# run the real host (`target/debug/outboxd`, or $OUTBOXD_BIN; `plugins/out/webhook.wasm`), so
# build the host first (`make build`).
#
#   producers/python/test.sh [pytest arguments…]      e.g. -k sqlite, -x, -q
#   producers/python/test.sh --install-only           the virtualenv only
#
# The virtualenv lives in <repo>/.toolchains/producers-python (ignored by git). It is made from
# the pinned requirements-test.txt once, with the package installed editable, and made again when
# that file, pyproject.toml or the repository's path changes (a stamp file keeps their hash).
# $PYTHON picks the interpreter (default python3, 3.11 or newer). With CI set, a database or host
# binary that is missing fails the tests; without it they are skipped with a loud message.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="$repo/.toolchains/producers-python"
stamp="$venv/installed.stamp"
python="${PYTHON:-python3}"

log() { printf '[producers/python] %s\n' "$*" >&2; }

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  log "Python 3.11 or newer is needed, $python is $("$python" --version 2>&1)"
  exit 1
}

want="$(cat "$here/requirements-test.txt" "$here/pyproject.toml" | sha256sum | cut -d' ' -f1) $repo $("$python" --version 2>&1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing the test environment into ${venv#"$repo"/}"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
  # Retried: a registry hiccup must not fail a cold CI run.
  for try in 1 2 3; do
    "${pip[@]}" install -r "$here/requirements-test.txt" && break
    if [ "$try" = 3 ]; then log "pip install failed 3 times"; exit 1; fi
    log "pip install failed (try $try of 3); retrying in $((try * 5))s"
    sleep $((try * 5))
  done
  # The pinned hatchling builds the editable install; nothing else is downloaded.
  "${pip[@]}" install --no-build-isolation --no-index -e "$here"
  echo "$want" >"$stamp"
fi

# --install-only: the environment and nothing more (.ci/run installs it beside the compile).
if [ "${1:-}" = --install-only ]; then exit 0; fi
cd "$here"
exec "$venv/bin/python" -m pytest "$@"
