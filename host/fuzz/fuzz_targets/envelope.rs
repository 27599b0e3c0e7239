//! libFuzzer's entry for the envelope check (`checks/envelope.rs`, whose doc says what it checks and
//! how an input is laid out). `make test` replays the same check over `seeds/envelope/`
//! (tests/fuzz_seeds.rs); `make fuzz` runs this target.

#![no_main]

#[path = "../checks/envelope.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
