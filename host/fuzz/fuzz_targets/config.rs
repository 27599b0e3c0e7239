//! libFuzzer's entry for the config check (`checks/config.rs`, whose doc says what it checks and
//! how an input is laid out). `make test` replays the same check over `seeds/config/`
//! (tests/fuzz_seeds.rs); `make fuzz` runs this target.

#![no_main]

#[path = "../checks/config.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
