//! The fuzz targets' checks (`host/fuzz/checks/`, the code `make fuzz` runs under libFuzzer) over
//! their seed corpora (`host/fuzz/seeds/TARGET/`, in git): every seed runs through its check, so
//! a change that breaks a check or a parser's property on a known input fails `make test`, and
//! the checks keep compiling against the library without a fuzzing toolchain.

use std::path::{Path, PathBuf};

#[path = "../host/fuzz/checks/config.rs"]
mod config;
#[path = "../host/fuzz/checks/envelope.rs"]
mod envelope;
#[path = "../host/fuzz/checks/judge.rs"]
mod judge;

/// The seed files of `target`, sorted by name; panics when there are none.
fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files
}

/// Runs `check` over every seed of `target`, naming the seeds whose check panicked.
fn replay(target: &str, check: fn(&[u8])) {
    let failed: Vec<String> = seeds(target)
        .into_iter()
        .filter(|path| {
            let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            std::panic::catch_unwind(|| check(&data)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(failed.is_empty(), "{target}: the check fails on {failed:?}");
}

#[test]
fn config_seeds_pass_the_config_check() {
    replay("config", config::check);
}

#[test]
fn envelope_seeds_pass_the_envelope_check() {
    replay("envelope", envelope::check);
}

#[test]
fn judge_seeds_pass_the_judge_check() {
    replay("judge", judge::check);
}
