//! `OUTBOXD_<SECTION>_<KEY>` environment overrides, applied to the TOML table before it is
//! deserialized.

use super::{ConfigError, ENV_PREFIX, invalid};

/// Sections that take environment overrides.
const ENV_SECTIONS: [&str; 8] = [
    "database",
    "worker",
    "retry",
    "plugins",
    "log",
    "admin",
    "retention",
    "telemetry",
];

/// Keys whose environment override is a comma-separated list.
const LIST_KEYS: [&str; 2] = ["app_codes", "delays"];

/// Applies `OUTBOXD_<SECTION>_<KEY>` variables to `table`; returns the variable names used.
pub(super) fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<String>, ConfigError> {
    let mut applied = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        let Some((section, key)) = ENV_SECTIONS.iter().find_map(|s| {
            rest.strip_prefix(s)
                .and_then(|k| k.strip_prefix('_'))
                .map(|k| (*s, k))
        }) else {
            continue; // OUTBOXD_TEST_*, OUTBOXD_PLUGIN_DIR, … belong to other tools
        };
        let entry = table
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let Some(section_table) = entry.as_table_mut() else {
            return Err(invalid(section, "must be a table"));
        };
        section_table.insert(key.to_string(), env_value(key, &value));
        applied.push(name);
    }
    applied.sort();
    Ok(applied)
}

/// Interprets an environment value: a list for list keys, else a TOML scalar when it parses as
/// one (`500`, `true`), else the text itself.
fn env_value(key: &str, value: &str) -> toml::Value {
    if LIST_KEYS.contains(&key) && !value.trim_start().starts_with('[') {
        return toml::Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_string()))
                .collect(),
        );
    }
    match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut parsed) => parsed
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value.into())),
        Err(_) => toml::Value::String(value.to_string()),
    }
}
