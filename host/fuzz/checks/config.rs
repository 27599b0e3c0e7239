//! The config loader (`Config::from_toml_str`, the path of `Config::load` after the file is
//! read): any text and environment either load into a configuration that keeps the loader's
//! rules or fail with a `ConfigError` naming the key or origin, never a panic.
//!
//! Input layout (`seeds/config/`): UTF-8 text (other bytes are skipped: a file that is not UTF-8
//! fails to read before parsing); the TOML file up to a line `#@env`, then `NAME=VALUE` lines
//! as environment variables (`OUTBOXD_WORKER_BATCH_SIZE=10`).

use outboxd::config::{Config, ConfigError, DEADLINE_MARGIN};

/// Checks one input: panics when it breaks the property this module describes.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (toml, env) = text.split_once("\n#@env\n").unwrap_or((text, ""));
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    match Config::from_toml_str(toml, env.clone()) {
        Ok(config) => {
            let worker = &config.worker;
            assert!((1..=5000).contains(&worker.batch_size));
            assert!((1..=256).contains(&worker.concurrency));
            assert!(!worker.app_codes.is_empty());
            assert!(!worker.publish_timeout.is_zero());
            let floor = worker.publish_timeout.checked_add(DEADLINE_MARGIN);
            assert!(floor.is_some_and(|floor| worker.lease >= floor));
            assert!((1..=1000).contains(&config.database.max_connections));
            assert!(config.retry.max_attempts >= 1);
            // Deterministic: the same input loads to the same configuration.
            let again = Config::from_toml_str(toml, env).expect("loads twice");
            assert_eq!(again, config);
        }
        Err(err) => {
            match &err {
                ConfigError::Invalid { key, message } => {
                    assert!(!key.is_empty(), "no key: {message}");
                    assert!(!message.is_empty(), "no message for {key}");
                }
                ConfigError::Parse { origin, message } => {
                    assert!(origin.starts_with("<text>"), "origin {origin:?}");
                    assert!(!message.is_empty(), "no message from {origin}");
                }
                ConfigError::Read { .. } => panic!("nothing is read: {err}"),
            }
            assert!(!err.to_string().is_empty());
        }
    }
}
