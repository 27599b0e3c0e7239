# outboxd build entry points.

# ---------------------------------------------------------------------------------------------
# plugins: every guest plugin (plugins/*) and test guest (tests/plugins/*) built for
# wasm32-wasip2, each `.wasm` copied into plugins/out/ (e.g. plugins/out/log.wasm,
# plugins/out/chaos.wasm). Guest workspaces keep their own target dirs.
# ---------------------------------------------------------------------------------------------
GUEST_WORKSPACES := plugins tests/plugins
PLUGIN_OUT := plugins/out

.PHONY: plugins
plugins:
	../shared/toolchain/install-wasm-target
	@mkdir -p $(PLUGIN_OUT)
	@set -e; for ws in $(GUEST_WORKSPACES); do \
		(cd $$ws && cargo build --release --target wasm32-wasip2); \
		cp $$ws/target/wasm32-wasip2/release/*.wasm $(PLUGIN_OUT)/; \
	done
	@ls -l $(PLUGIN_OUT)/*.wasm
