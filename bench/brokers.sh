#!/usr/bin/env bash
# bench/brokers.sh: outboxd delivering into each broker through the shipped `broker` plugin,
# beside that broker's own client publishing as many messages of the same shape with the same
# confirmation in the same run (docs/PERFORMANCE.md, "Brokers").
#
# Per broker (BROKERS, default "nats rabbitmq redis mqtt kafka"; the connections of
# bench/brokers.toml), on a fresh PostgreSQL database:
#   1. throughput: EVENTS events (200 rooms) drained by outboxd (batch 1000, 1 loop) table →
#      plugin → broker, each event marked after the broker confirmed it; then the raw client
#      publishes EVENTS messages in batches of 1000, pipelined, each confirmed (`--broker-raw`);
#   2. the same EVENTS through the native no-op publisher (no plugin, no broker): the
#      database-bound ceiling of outboxd on this machine, beside which the broker run is read;
#   Both drains print their CPU per event: the machine's (database, broker, outboxd) and
#   outboxd-bench's own (worker, plugin, broker client); once the cores are busy, a drain's rate
#   is bound by the first;
#   3. latency: producers commit 200 rows/s for LATENCY_SECS seconds; commit → delivered
#      (marked after the broker's confirmation) p50/p90/p99.
# MQTT runs against a private mosquitto (port MQTT_PORT, 18830) with `set_tcp_nodelay true`, started
# and stopped here: Mosquitto's default keeps Nagle's algorithm on its sockets, and a batch's second
# PUBACK then waits for the client's delayed ACK (200 events/s: commit → delivered p50 70–180 ms
# instead of ~10 ms; docs/PLUGINS.md, "Deliver to a broker").
# Needs the brokers of bench/brokers.toml running (Kafka: `make kafka-broker`, then
# `.toolchains/kafka/tansu broker --listener-url tcp://127.0.0.1:9092`), and those of
# bench/lib.sh. Environment: EVENTS (20000), LATENCY_SECS (20), BROKERS.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EVENTS=${EVENTS:-20000}
LATENCY_SECS=${LATENCY_SECS:-20}
BROKERS=${BROKERS:-nats rabbitmq redis mqtt kafka}
BROKER_PLUGIN=$REPO/plugins/out/broker.wasm
[ -f "$BROKER_PLUGIN" ] || { echo "no plugin at $BROKER_PLUGIN: make rust-plugins" >&2; exit 1; }

# The connections: bench/brokers.toml, MQTT's pointed at the private mosquitto.
MQTT_PORT=${MQTT_PORT:-18830}
CONFIG=$WORK/brokers.toml
sed "s#mqtt://127.0.0.1:1883#mqtt://127.0.0.1:$MQTT_PORT#" "$REPO/bench/brokers.toml" > "$CONFIG"
if [[ " $BROKERS " == *" mqtt "* ]]; then
  require_free_port "$MQTT_PORT" MQTT_PORT
  printf 'listener %s 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\npersistence false\n' \
    "$MQTT_PORT" > "$WORK/mosquitto.conf"
  mosquitto -c "$WORK/mosquitto.conf" > "$WORK/mosquitto.log" 2>&1 &
  MOSQUITTO_PID=$!
  CLEANUP+=("kill $MOSQUITTO_PID; wait $MOSQUITTO_PID 2>/dev/null")
  for _ in $(seq 1 50); do port_open "$MQTT_PORT" && break; sleep 0.1; done
fi

topic() {
  case $1 in
    nats | rabbitmq) echo 'outboxd-bench.{app_code}' ;;
    redis) echo 'outboxd-bench:{app_code}' ;;
    mqtt) echo 'outboxd-bench/{app_code}' ;;
    kafka) echo 'outboxd-bench' ;;
  esac
}

header "brokers: $EVENTS events per broker, then 200 events/s for ${LATENCY_SECS}s, PostgreSQL"
: > "$WORK/summary"
for broker in $BROKERS; do
  fresh_db postgres "outboxd_bench_$broker"
  args=(--plugin "$BROKER_PLUGIN" --plugin-config "connection=$broker" --plugin-config "topic=$(topic "$broker")")
  section "$broker, throughput: outboxd-bench --events $EVENTS --rooms 200 --shapes outboxd ${args[*]} --broker-raw"
  "$OUTBOXD_BENCH" --config "$CONFIG" --database-url "$URL" --events "$EVENTS" \
    --rooms 200 --shapes outboxd "${args[@]}" --broker-raw | tee "$WORK/out"
  line=$(grep '^broker:' "$WORK/out")
  raw=$(sed -E 's/.* ([0-9]+) msg\/s confirmed.*/\1/' <<<"$line")
  ours=$(sed -E 's/.*end to end ([0-9]+) ev\/s.*/\1/' <<<"$line")
  ratio=$(sed -E 's/.*= ([0-9.]+)x the raw client/\1/' <<<"$line")
  section "$broker, no-op publisher: outboxd-bench --events $EVENTS --rooms 200 --shapes outboxd"
  "$OUTBOXD_BENCH" --database-url "$URL" --events "$EVENTS" --rooms 200 --shapes outboxd | tee "$WORK/noop"
  noop=$(awk '$1 == "outboxd" {print $7}' "$WORK/noop")
  # CPU per event of each drain (the machine's: database, broker, outboxd; and outboxd's own).
  cpu=$(awk '$1 == "outboxd" {print $11 "/" $12}' "$WORK/out")
  noop_cpu=$(awk '$1 == "outboxd" {print $11 "/" $12}' "$WORK/noop")
  section "$broker, latency: outboxd-bench --rate 200 --seconds $LATENCY_SECS ${args[*]} --broker-raw"
  "$OUTBOXD_BENCH" --config "$CONFIG" --database-url "$URL" --rate 200 \
    --seconds "$LATENCY_SECS" "${args[@]}" --broker-raw | tee "$WORK/lat"
  p=$(awk '/^ *200 / {print $5 " / " $6 " / " $7}' "$WORK/lat" | head -n1)
  printf "%-9s %10s %10s %7s %10s %7s %13s %13s   %s\n" "$broker" "$ours" "$raw" "${ratio}x" "$noop" \
    "$(awk -v a="$ours" -v b="$noop" 'BEGIN { printf "%.2fx", a / b }')" "$cpu" "$noop_cpu" "$p" >> "$WORK/summary"
done

echo
echo "== summary (events/s: outboxd table → broker, confirmed; the raw client's confirmed msg/s; outboxd with the no-op publisher; CPU µs per event of the broker drain and of the no-op drain, the machine's / outboxd's own; commit → delivered at 200/s, ms)"
printf "%-9s %10s %10s %7s %10s %7s %13s %13s   %s\n" broker outboxd raw "vs raw" no-op "vs no-op" "cpu us/ev" "no-op cpu" "p50 / p90 / p99"
cat "$WORK/summary"
