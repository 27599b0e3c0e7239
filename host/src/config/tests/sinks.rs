//! Config tests of `[[sink]]` and `[[route]]`: limits, byte and batch sizes, the breaker.

use super::*;

/// A `[[sink]]` named `name` with these limits.
fn sink_with_limits(name: &str, limits: &str) -> String {
    format!("[[sink]]\nname = \"{name}\"\nplugin = \"{name}.wasm\"\nlimits = {{ {limits} }}\n")
}

#[test]
fn default_batch_size_follows_the_sinks_limits() {
    let batch = |text: &str| {
        let config = load_str(text, &[]).unwrap();
        (
            config.worker.batch_size,
            config.worker.batch_size_is_default,
        )
    };
    // No sink, or sinks taking 1000 events per call: the default.
    assert_eq!(batch(""), (1000, true));
    assert_eq!(batch(&sink_with_limits("a", "")), (1000, true));
    // 200 events per 3 s call: six calls fit in 20 s − 1 s, so 1200 would fit; capped at 1000.
    assert_eq!(
        batch(&sink_with_limits(
            "a",
            "max_batch_size = 200, publish_timeout = \"3s\""
        )),
        (1000, true)
    );
    // 100 per 3 s call: 6 calls, 600 events; the tightest sink decides.
    let two = format!(
        "{}{}",
        sink_with_limits("a", "max_batch_size = 100, publish_timeout = \"3s\""),
        sink_with_limits("b", "")
    );
    assert_eq!(batch(&two), (600, true));
    // 100 per 5 s call: 300 would fit, but the default never goes below 500, so the deadline
    // check names the sink as it did with the earlier default of 500.
    let err = load_str(
        &sink_with_limits("a", "max_batch_size = 100, publish_timeout = \"5s\""),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("sink[0].limits.publish_timeout") && err.contains("× 5 calls"),
        "{err}"
    );
    // A batch size that is set is kept as given and checked as such.
    let set = format!(
        "[worker]\nbatch_size = 300\n{}",
        sink_with_limits("a", "max_batch_size = 100, publish_timeout = \"5s\"")
    );
    assert_eq!(batch(&set), (300, false));
    let err = load_str(&format!("[worker]\nbatch_size = 1000\n{two}"), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("× 10 calls"), "{err}");
}

#[test]
fn a_reload_keeps_the_running_default_batch_while_the_sinks_fit_it() {
    let load = |text: &str| load_str(text, &[]).unwrap();
    let tight = sink_with_limits("a", "max_batch_size = 100, publish_timeout = \"3s\"");
    let running = load(&tight);
    assert_eq!(running.worker.batch_size, 600);
    // Relaxed limits would raise the default to 1000; the running 600 still fits them: kept.
    let mut next = load(&sink_with_limits("a", ""));
    next.keep_running_default_batch(&running);
    assert_eq!(next.worker.batch_size, 600);
    // Tighter limits cannot take the running 1000: the new default stands, and the reload's
    // restart-only check names it.
    let mut next = load(&tight);
    next.keep_running_default_batch(&load(""));
    assert_eq!(next.worker.batch_size, 600);
    // A batch size that is set is never replaced.
    let mut set = load(&format!(
        "[worker]\nbatch_size = 700\n{}",
        sink_with_limits("a", "")
    ));
    set.keep_running_default_batch(&running);
    assert_eq!(set.worker.batch_size, 700);
}

#[test]
fn run_needs_a_sink_and_a_route() {
    let err = Config::defaults()
        .check_deliverable()
        .unwrap_err()
        .to_string();
    assert!(err.contains("no [[sink]] configured"), "{err}");
    let sink_only = load_str("[[sink]]\nname = \"log\"\nplugin = \"log.wasm\"\n", &[]).unwrap();
    let err = sink_only.check_deliverable().unwrap_err().to_string();
    assert!(
        err.contains("no [[route]] configured") && err.contains("sink = \"log\""),
        "{err}"
    );
    let both = load_str(
        "[[sink]]\nname = \"log\"\nplugin = \"log.wasm\"\n[[route]]\nevent_type = \"*\"\nsink = \"log\"\n",
        &[],
    )
    .unwrap();
    both.check_deliverable().unwrap();
}

#[test]
fn batch_bytes_default_to_an_eighth_of_memory_and_are_checked() {
    let config = load_str(&sink_with_limits("a", r#"memory = "32MiB""#), &[]).unwrap();
    let limits = config.publishing.sinks()[0].limits();
    assert_eq!(limits.batch_bytes(), 4 << 20);
    assert_eq!(limits.event_size_limit(), 4 << 20);

    let error = load_str(
        &sink_with_limits("a", r#"memory = "8MiB", max_batch_bytes = "9MiB""#),
        &[],
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid config key `sink[0].limits.max_batch_bytes`"),
        "{error}"
    );
    let error = load_str(
        &sink_with_limits("a", r#"max_batch_bytes = "1MiB", max_event_size = "2MiB""#),
        &[],
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid config key `sink[0].limits.max_event_size`"),
        "{error}"
    );
    let error = load_str(&sink_with_limits("a", "max_batch_bytes = 1023"), &[]).unwrap_err();
    assert!(error.to_string().contains("at least 1KiB"), "{error}");
    // At the boundaries: 1KiB, and all of memory.
    load_str(
        &sink_with_limits("a", "max_batch_bytes = 1024, max_event_size = 1024"),
        &[],
    )
    .unwrap();
    load_str(
        &sink_with_limits("a", r#"memory = "2MiB", max_batch_bytes = "2MiB""#),
        &[],
    )
    .unwrap();
}

#[test]
fn worker_max_batch_bytes_is_the_sinks_default() {
    let text = format!(
        "[worker]\nmax_batch_bytes = \"1MiB\"\n{}{}",
        sink_with_limits("a", r#"memory = "64MiB""#),
        sink_with_limits("b", r#"max_batch_bytes = "2MiB""#)
    );
    let config = load_str(&text, &[]).unwrap();
    let sinks = config.publishing.sinks();
    assert_eq!(sinks[0].limits().batch_bytes(), 1 << 20);
    assert_eq!(sinks[1].limits().batch_bytes(), 2 << 20);
    let config = load_str(
        &sink_with_limits("a", ""),
        &[("OUTBOXD_WORKER_MAX_BATCH_BYTES", "512KiB")],
    )
    .unwrap();
    assert_eq!(
        config.publishing.sinks()[0].limits().batch_bytes(),
        512 << 10
    );
    let error = load_str(
        &format!(
            "[worker]\nmax_batch_bytes = \"4MiB\"\n{}",
            sink_with_limits("a", r#"memory = "2MiB""#)
        ),
        &[],
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid config key `worker.max_batch_bytes`"),
        "{error}"
    );
}

#[test]
fn attempts_not_above_the_breaker_failures_are_warned_about() {
    let text = format!(
        "[retry]\nmax_attempts = 3\n{}",
        sink_with_limits("a", r#"memory = "64MiB""#)
    );
    let warnings = load_str(&text, &[]).unwrap().warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("retry.max_attempts (3) is not above sink[0].breaker.failures (5)"),
        "{}",
        warnings[0]
    );
    let text = format!(
        "[retry]\nmax_attempts = 6\n{}",
        sink_with_limits("a", r#"memory = "64MiB""#)
    );
    assert!(load_str(&text, &[]).unwrap().warnings().is_empty());
    assert!(Config::defaults().warnings().is_empty());
}

#[test]
fn max_retry_after_must_be_positive() {
    let error = load_str(&sink_with_limits("a", r#"max_retry_after = "0s""#), &[]).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid config key `sink[0].limits.max_retry_after`"),
        "{error}"
    );
    let config = load_str(&sink_with_limits("a", r#"max_retry_after = "10m""#), &[]).unwrap();
    assert_eq!(
        config.publishing.sinks()[0].limits().max_retry_after,
        Duration::from_secs(600)
    );
}

/// A bad `allow_hosts` entry or a zero HTTP limit is refused when the config loads (naming the
/// key and the entry), not later when the plugin starts; a good list is parsed once, here.
#[test]
fn outbound_http_limits_are_checked_at_load() {
    for (limits, key, names) in [
        (
            r#"allow_hosts = ["hooks.example.com"]"#,
            "allow_hosts",
            "hooks.example.com",
        ),
        (
            r#"allow_hosts = ["https://ok.example", "ftp://x"]"#,
            "allow_hosts",
            "ftp://x",
        ),
        (
            r#"allow_hosts = ["https://a.example/path"]"#,
            "allow_hosts",
            "/path",
        ),
        (
            r#"allow_hosts = ["https://a.example"], connect_timeout = "0s""#,
            "connect_timeout",
            "allow_hosts",
        ),
        (
            r#"allow_hosts = ["https://a.example"], first_byte_timeout = "0s""#,
            "first_byte_timeout",
            "allow_hosts",
        ),
        (
            r#"allow_hosts = ["https://a.example"], max_response_size = "0B""#,
            "max_response_size",
            "allow_hosts",
        ),
    ] {
        let error = load_str(&sink_with_limits("a", limits), &[])
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("invalid config key `sink[0].limits.{key}`")),
            "{limits}: {error}"
        );
        assert!(error.contains(names), "{limits}: {error}");
    }
    // Zero HTTP limits do not matter to a sink that may send no request.
    let quiet = load_str(&sink_with_limits("a", r#"connect_timeout = "0s""#), &[]).unwrap();
    assert!(quiet.publishing.sinks()[0].allowed_origins().is_empty());
    let config = load_str(
        &sink_with_limits(
            "a",
            r#"allow_hosts = ["https://Hooks.Example.com", "http://127.0.0.1:8080/"]"#,
        ),
        &[],
    )
    .unwrap();
    let hosts: Vec<&str> = config.publishing.sinks()[0]
        .allowed_origins()
        .iter()
        .map(|origin| origin.host())
        .collect();
    assert_eq!(hosts, ["hooks.example.com", "127.0.0.1"]);
}
