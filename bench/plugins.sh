#!/usr/bin/env bash
# bench/plugins.sh: what publishing through a WebAssembly plugin costs per event, without a
# database (docs/PERFORMANCE.md, "Plugin host"). `outboxd plugin bench` on the shipped Rust plugins:
# the chaos plugin answering `ok` (the host's own cost: copying events in and results out) and the
# log plugin writing one JSON line per event (log lines filtered out by RUST_LOG=warn).
# The sample event has a 256-byte body.
#
# Environment: EVENTS (20000), BATCH (100), OUTBOXD (default target/release/outboxd). Seconds.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-20000}
BATCH=${BATCH:-100}
header "plugin host: $EVENTS events in batches of $BATCH"
for spec in "chaos.wasm quiet=true" "log.wasm format=json"; do
  set -- $spec
  section "$1 ($2)"
  "$OUTBOXD" plugin bench "$REPO/plugins/out/$1" --config "$2" --events "$EVENTS" --batch-size "$BATCH"
done
