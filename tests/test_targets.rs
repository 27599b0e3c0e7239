//! Guard: every test file in the top-level `tests/` folder is a test target of the host crate.
//!
//! The integration tests live in `tests/` beside `host/`, so Cargo does not discover them: each
//! needs a `[[test]]` entry with `path = "../tests/…"` in `host/Cargo.toml`, and a file without
//! one would compile nowhere and never run. This test lists the test files — `tests/*.rs` and
//! `tests/*/main.rs` (a test binary split into modules) — and fails naming every one that no
//! `[[test]]` entry points at, with the entry to add. Folders without a `main.rs` (`support/`,
//! `fixtures/`, `http/`: modules the binaries include; `plugins/`: the guest workspace) are not
//! test files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `host/` package directory (its `Cargo.toml` declares the test targets).
fn host_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level `tests/` folder.
fn tests_dir() -> PathBuf {
    host_dir().join("../tests")
}

/// Canonical paths of the files `host/Cargo.toml` declares as `[[test]]` targets.
fn declared_test_targets() -> BTreeSet<PathBuf> {
    let manifest_path = host_dir().join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest_path.display()));
    let manifest: toml::Table = toml::from_str(&manifest)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", manifest_path.display()));
    let Some(targets) = manifest.get("test").and_then(|t| t.as_array()) else {
        return BTreeSet::new();
    };
    targets
        .iter()
        .map(|target| {
            let path = target
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or_else(|| panic!("[[test]] without a path: {target}"));
            let path = host_dir().join(path);
            path.canonicalize()
                .unwrap_or_else(|e| panic!("[[test]] path {}: {e}", path.display()))
        })
        .collect()
}

/// Canonical paths of the test files in `tests/`: `*.rs`, and `*/main.rs`.
fn test_files() -> BTreeSet<PathBuf> {
    let dir = tests_dir();
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    let mut files = BTreeSet::new();
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let candidate = if path.is_dir() {
            path.join("main.rs")
        } else {
            path
        };
        if candidate.is_file() && candidate.extension().is_some_and(|e| e == "rs") {
            files.insert(candidate.canonicalize().expect("canonical path"));
        }
    }
    files
}

#[test]
fn every_test_file_is_a_test_target() {
    let tests = tests_dir().canonicalize().expect("tests/ folder");
    let files = test_files();
    assert!(
        files.iter().any(|f| f.ends_with("test_targets.rs")),
        "the guard did not find itself in {}: {files:?}",
        tests.display()
    );
    let declared = declared_test_targets();
    let missing: Vec<String> = files
        .difference(&declared)
        .map(|file| {
            let relative = file.strip_prefix(&tests).expect("inside tests/");
            let name = relative
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .map(|first| first.trim_end_matches(".rs").to_string())
                .expect("file name");
            let relative = relative.display();
            format!(
                "tests/{relative} never runs: add to host/Cargo.toml\n\n\
                 [[test]]\nname = \"{name}\"\npath = \"../tests/{relative}\"\n"
            )
        })
        .collect();
    assert!(missing.is_empty(), "\n{}", missing.join("\n"));
}
