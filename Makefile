# outboxd — `make demo` runs the main job on embedded SQLite; `make test` runs every test.
# Both install what they need (the wasm32-wasip2 target) and build the plugins first.

CARGO ?= cargo
DEMO_DIR := target/demo
OUTBOXD := target/debug/outboxd
DEMO := $(OUTBOXD) --config demo/outboxd.toml

.PHONY: all build plugins demo test chaos bench clean

all: build

build: plugins
	$(CARGO) build --bin outboxd

# ---------------------------------------------------------------------------------------------
# plugins: every guest plugin (plugins/*) and test guest (tests/plugins/*) built for
# wasm32-wasip2 (each workspace in its own target/, whatever CARGO_TARGET_DIR says), each `.wasm`
# copied into plugins/out/ (e.g. plugins/out/log.wasm,
# plugins/out/chaos.wasm). Guest workspaces keep their own target dirs.
# ---------------------------------------------------------------------------------------------
GUEST_WORKSPACES := plugins tests/plugins
PLUGIN_OUT := plugins/out

plugins:
	bash ../shared/toolchain/install-wasm-target
	@mkdir -p $(PLUGIN_OUT)
	@set -e; for ws in $(GUEST_WORKSPACES); do \
		(cd $$ws && $(CARGO) build --release --target wasm32-wasip2 --target-dir target); \
		cp $$ws/target/wasm32-wasip2/release/*.wasm $(PLUGIN_OUT)/; \
	done
	@ls -l $(PLUGIN_OUT)/*.wasm

## demo: migrate a fresh SQLite file, enqueue sample room events, deliver them through the log
## plugin until drained, print the status.
demo: build
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(DEMO) migrate
	$(DEMO) enqueue --room room-1 --type RoomGiftSent --count 3 --body-json '{"gift":"rose","from":"u1","to":"u2"}'
	$(DEMO) enqueue --room room-1 --type RoomMicChanged --body-json '{"seat":2,"user":"u3","action":"up"}'
	$(DEMO) enqueue --room room-2 --type RoomHeatChanged --count 2 --body-json '{"heat":1024}'
	$(DEMO) run --drain
	$(DEMO) status

## test: the plugins' own unit tests (natively), then the host's unit, conformance (SQLite,
## MariaDB, PostgreSQL), EXPLAIN, worker, plugin-host, sink and end-to-end tests.
test: plugins
	cd plugins && $(CARGO) test --no-fail-fast
	$(CARGO) test --workspace --no-fail-fast

## chaos: the bigger kill-chaos run (20,000 events, 4 hosts, 8 kill -9s, one database restart,
## on a private PostgreSQL and a private MariaDB the test starts itself). `make test` runs a
## bounded form of the same test.
chaos: plugins
	OUTBOXD_CHAOS=full $(CARGO) test -p outboxd --test kill_chaos -- --nocapture --test-threads=1

## bench: delivery throughput on the configured database (default SQLite), vs the Go shape.
bench: build
	$(OUTBOXD) bench --events 20000

clean:
	$(CARGO) clean
	rm -rf plugins/target tests/plugins/target $(PLUGIN_OUT) $(DEMO_DIR)
