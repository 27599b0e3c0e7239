//! [`Config::from_toml_str`] against [`Config::load`] of the same text in a file, and the inputs
//! the config loader's fuzz target (`host/fuzz`, `make fuzz`) found, kept as plain tests.

use super::*;

fn load_file(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboxd.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), owned(env))
}

fn owned(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn text_loads_as_the_same_file_would() {
    let text = r#"
        [worker]
        batch_size = 200
        [[sink]]
        name = "log"
        plugin = "log.wasm"
        [[route]]
        event_type = "*"
        sink = "log"
    "#;
    let env = [("OUTBOXD_WORKER_APP_CODES", "live,ktv")];
    let from_text = Config::from_toml_str(text, owned(&env)).unwrap();
    let mut from_file = load_file(text, &env).unwrap();
    // The file's folder is the plugin's base; the text has none.
    assert!(
        from_file.publishing.sinks()[0]
            .plugin()
            .ends_with("log.wasm")
    );
    from_file.publishing = from_text.publishing.clone();
    assert_eq!(from_text, from_file);
    assert_eq!(
        from_text.publishing.sinks()[0].plugin(),
        Path::new("log.wasm")
    );

    let err = Config::from_toml_str("[worker]\nbatch_size = 0\n", Vec::new()).unwrap_err();
    assert!(matches!(&err, ConfigError::Invalid { key, .. } if key == "worker.batch_size"));
    let err = Config::from_toml_str("[worker\n", Vec::new()).unwrap_err();
    assert!(matches!(&err, ConfigError::Parse { origin, .. } if origin == "<text>"));
}

/// Found by the config target: `publish_timeout + 1s` overflowed `Duration` and panicked.
#[test]
fn a_publish_timeout_near_duration_max_is_an_error_not_a_panic() {
    let err = Config::from_toml_str(
        "[worker]\npublish_timeout = \"18446744073709551615s\"\n",
        Vec::new(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Invalid { key, .. } if key == "worker.lease"),
        "{err}"
    );
}

/// Found by the config target: a sink's `publish_timeout` (× its calls) + 1s overflowed
/// `Duration` and panicked.
#[test]
fn a_sink_deadline_near_duration_max_is_an_error_not_a_panic() {
    for calls in ["", ", max_batch_size = 1"] {
        let text = format!(
            "[[sink]]\nname = \"a\"\nplugin = \"a.wasm\"\n\
             limits = {{ publish_timeout = \"18446744073709551615s\"{calls} }}\n"
        );
        let err = Config::from_toml_str(&text, Vec::new()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if key == "sink[0].limits.publish_timeout"),
            "{err}"
        );
    }
}
