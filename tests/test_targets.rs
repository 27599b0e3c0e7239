//! Guard: every test file in the top-level `tests/` folder is a module of the test binary.
//!
//! The integration tests are one binary, `tests/main.rs` (`[[test]] integration` in
//! `host/Cargo.toml`), which mounts each file with `mod NAME;`. A file it does not mount compiles
//! nowhere and never runs, without a warning. This test lists the test files — `tests/*.rs` and
//! `tests/*/mod.rs` (a module split into files) — and fails naming every one `tests/main.rs`
//! does not mount, with the line to add. Folders without a `mod.rs` (`worker/`, mounted by
//! `worker.rs`; `plugins/`, the guest workspace; `scripts/`) are not test files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level `tests/` folder.
fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests")
}

/// The modules `tests/main.rs` mounts (`mod NAME;`).
fn mounted_modules() -> BTreeSet<String> {
    let root = tests_dir().join("main.rs");
    let source = std::fs::read_to_string(&root)
        .unwrap_or_else(|e| panic!("reading {}: {e}", root.display()));
    source
        .lines()
        .filter_map(|line| line.trim().strip_prefix("mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// The module names of the test files in `tests/`: `NAME.rs` (but `main.rs`) and `NAME/mod.rs`.
fn test_files() -> BTreeSet<String> {
    let dir = tests_dir();
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    let mut names = BTreeSet::new();
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = if path.is_dir() && path.join("mod.rs").is_file() {
            path.file_name()
        } else if path.extension().is_some_and(|e| e == "rs") {
            path.file_stem()
        } else {
            None
        };
        if let Some(name) = name.and_then(|n| n.to_str()) {
            names.insert(name.to_string());
        }
    }
    names.remove("main");
    names
}

#[test]
fn every_test_file_is_a_module_of_the_test_binary() {
    let files = test_files();
    assert!(
        files.contains("test_targets"),
        "the guard did not find itself in {}: {files:?}",
        tests_dir().display()
    );
    let mounted = mounted_modules();
    let missing: Vec<String> = files
        .difference(&mounted)
        .map(|name| format!("tests/{name} never runs: add `mod {name};` to tests/main.rs"))
        .collect();
    assert!(missing.is_empty(), "\n{}", missing.join("\n"));
}
