//! Real `outboxd run` processes for the chaos tests: the command with a config, one host logging
//! to its own file, and the order check of what a receiver saw (each chaos test uses its part).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One `outboxd run` process, logging to its own file.
pub struct Host {
    /// The process.
    pub child: Child,
    /// Its log (stderr).
    pub log: PathBuf,
}

/// `outboxd --config CONFIG` with no admin listener (several hosts at once), `RUST_LOG=info`, and
/// no database URL from the environment.
pub fn outboxd(config: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outboxd"));
    command
        .env_remove("OUTBOXD_DATABASE_URL")
        .env("OUTBOXD_ADMIN_LISTEN", "")
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(config);
    command
}

/// Starts `outboxd run` as node `name`, logging to `DIR/NAME.log`.
pub fn start_host(config: &Path, dir: &Path, name: &str) -> Host {
    let log = dir.join(format!("{name}.log"));
    let child = outboxd(config)
        .arg("run")
        .env("OUTBOXD_WORKER_NODE_ID", name)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start outboxd run");
    Host { child, log }
}

/// Each room's versions in the order they first reached the receiver must count up 1, 2, 3, …
/// Returns the violations found (at most 10, described).
pub fn order_violations(first_arrivals: &[(String, i64)]) -> Vec<String> {
    let mut next: HashMap<&str, i64> = HashMap::new();
    let mut violations = Vec::new();
    for (room, version) in first_arrivals {
        let expected = next.entry(room).or_insert(1);
        if *version != *expected && violations.len() < 10 {
            violations.push(format!(
                "{room}: version {version} arrived when {expected} was next"
            ));
        }
        *expected = version + 1;
    }
    violations
}
