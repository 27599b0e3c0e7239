//! The host's integration tests, as one test binary (`[[test]] integration` in `host/Cargo.toml`):
//! one module per file or folder of `tests/`, so a test is named after its file
//! (`conformance::read::mysql::…`, `kill_chaos::…`). One binary compiles and links wasmtime,
//! sqlx and the rest once, not once per file. nextest still runs each test in a process of its
//! own (`tests/nextest.toml`); `cargo nextest run -E 'test(/^worker::/)'` runs one file's tests.
//!
//! Each file's own doc comment says what it proves; [`test_targets`] fails naming any file of
//! `tests/` this list lacks.

// Shared by the test modules.
mod fixtures;
mod fleet;
mod http;
mod support;

// Stores and plans.
mod cached_plans;
mod conformance;
mod history_plans;
mod live_indexes;
mod pool;
mod sqlite_plans;
mod stale_plans;

// Workers, wake-ups and clocks.
mod binlog_wake;
mod clock;
mod wake;
mod worker;

// Plugins and sinks.
mod chaos;
mod http_servers;
mod isolation;
mod plugin_host;
mod plugin_kit;
mod reload;
mod sink_http;
mod sinks;

// Brokers.
mod brokers;

// The binary, the service and the console.
mod cli;
mod console;
mod service;

// Fleets of hosts killed, paused and cut off.
mod kill_chaos;
mod partition_chaos;

// Guards over the repository itself.
mod fuzz_seeds;
mod test_targets;
