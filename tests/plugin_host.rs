//! Plugin host tests against the real guest plugins built by `make plugins` (`plugins/out/`):
//! the log plugin, the misbehaving `chaos` plugin, the world/version check, routing, the
//! precompiled-artifact cache and instance reuse.

use crate::fixtures;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use fixtures::{captured, engine, logs_of, plugin, retryable_message, settings, sink_config};
use outboxd::config::{ByteSize, PluginSettings, Publishing, RouteConfig, SinkConfig, SinkSpec};
use outboxd::plugin::{
    CacheOutcome, PluginEngine, PluginError, PluginSink, Route, RoutedPublisher, TestReport, check,
    load_publisher, parse_config_pair, parse_event_json, test_plugin,
};
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::trace_context::TraceContext;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn event(n: usize, event_type: &str) -> Event {
    Event {
        app_code: "app".to_string(),
        event_id: format!("evt-{n}"),
        event_type: event_type.to_string(),
        room_id: format!("room-{}", n % 3),
        room_version: n as i64 + 10,
        occurred_at_ms: 1_700_000_000_000 + n as i64,
        body: vec![0, 159, 146, 150, n as u8],
        attempt: 1,
        trace: None,
    }
}

fn events(count: usize, event_type: &str) -> Vec<Event> {
    (0..count).map(|n| event(n, event_type)).collect()
}

/// `count` events that carry a producer's trace context.
fn traced(count: usize) -> Vec<Event> {
    let context = TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "rojo=00f067aa0ba902b7",
    )
    .unwrap();
    (0..count)
        .map(|n| Event {
            trace: Some(context.clone()),
            ..event(n, "x")
        })
        .collect()
}

async fn start(config: SinkConfig) -> PluginSink {
    PluginSink::start(&engine(), &SinkSpec::new(config.clone()).unwrap())
        .await
        .unwrap_or_else(|e| panic!("sink {} failed to start: {e}", config.name))
}

// ---------------------------------------------------------------------------------------------
// The log plugin
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn log_plugin_writes_every_field_as_json() {
    captured();
    let sink = start(sink_config("log-json", "log", &[("format", "json")])).await;
    let batch = events(3, "room.created");
    let outcomes = sink.publish(&batch).await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 3]);
    let lines: Vec<serde_json::Value> = logs_of("log-json")
        .iter()
        .map(|fields| serde_json::from_str(fields["message"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "one log line per event");
    for (line, event) in lines.iter().zip(&batch) {
        assert_eq!(line["app_code"], event.app_code.as_str());
        assert_eq!(line["event_id"], event.event_id.as_str());
        assert_eq!(line["event_type"], event.event_type.as_str());
        assert_eq!(line["room_id"], event.room_id.as_str());
        assert_eq!(line["room_version"], event.room_version);
        assert_eq!(line["occurred_at_ms"], event.occurred_at_ms);
        assert_eq!(line["attempt"], event.attempt);
        let body = base64::engine::general_purpose::STANDARD
            .decode(line["body"].as_str().unwrap())
            .unwrap();
        assert_eq!(body, event.body);
    }
}

#[tokio::test]
async fn log_plugin_text_format_and_unknown_format() {
    captured();
    let sink = start(sink_config("log-text", "log", &[("format", "text")])).await;
    assert_eq!(
        sink.publish(&events(2, "room.closed")).await,
        vec![Outcome::Delivered; 2]
    );
    let messages: Vec<String> = logs_of("log-text")
        .iter()
        .map(|f| f["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(messages.len(), 2);
    assert!(
        messages[1].contains("event_id=\"evt-1\"") && messages[1].contains("body_bytes=5"),
        "{messages:?}"
    );

    let error = PluginSink::start(
        &engine(),
        &SinkSpec::new(sink_config("log-xml", "log", &[("format", "xml")])).unwrap(),
    )
    .await
    .err()
    .expect("unknown format must stop the sink");
    assert!(matches!(error, PluginError::Init { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "sink `log-xml`: plugin init failed: log plugin: unknown format `xml`: use `json` or `text`"
    );
}

// ---------------------------------------------------------------------------------------------
// Containment of misbehaving plugins
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn infinite_loop_hits_the_deadline_and_the_host_goes_on() {
    let mut config = sink_config("chaos-loop", "chaos", &[("behaviour", "loop")]);
    config.limits.publish_timeout = Duration::from_millis(300);
    let looping = start(config).await;
    let healthy = start(sink_config("chaos-healthy", "chaos", &[])).await;

    let started = Instant::now();
    let outcomes = looping.publish(&events(2, "room.created")).await;
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "epoch deadline not enforced: {:?}",
        started.elapsed()
    );
    for outcome in &outcomes {
        assert_eq!(
            retryable_message(outcome),
            "plugin `chaos-loop` exceeded its 300ms publish deadline"
        );
    }
    // The other sink, and the host, go on serving.
    assert_eq!(
        healthy.publish(&events(3, "room.created")).await,
        vec![Outcome::Delivered; 3]
    );
    // The looping sink gets a fresh instance on its next batch (and is contained again): the
    // first batch's call, then its two halves (side by side), each on an instance of its own.
    let built = looping.stats().instances_built;
    assert_eq!(built, 3, "the whole call, then each event alone");
    let again = looping.publish(&events(1, "room.created")).await;
    assert!(retryable_message(&again[0]).contains("deadline"));
    assert_eq!(looping.stats().instances_built, built + 1);
}

#[tokio::test]
async fn allocating_past_the_cap_hits_the_memory_limit() {
    let mut config = sink_config("chaos-alloc", "chaos", &[("behaviour", "alloc")]);
    config.limits.memory = ByteSize(16 << 20);
    let sink = start(config).await;
    let outcomes = sink.publish(&events(2, "room.created")).await;
    for outcome in &outcomes {
        assert_eq!(
            retryable_message(outcome),
            "plugin `chaos-alloc` exceeded its memory cap of 16777216 bytes"
        );
    }
    assert_eq!(sink.stats().idle_instances, 0, "the instance is discarded");
}

#[tokio::test]
async fn a_trap_fails_that_batch_and_the_next_one_gets_a_rebuilt_instance() {
    captured();
    let sink = start(sink_config(
        "chaos-trap",
        "chaos",
        &[("behaviour", "retryable"), ("trap_on_type", "boom")],
    ))
    .await;
    let first = sink.publish(&events(2, "room.created")).await;
    assert_eq!(retryable_message(&first[0]), "chaos retryable, call 1");

    let mut bad = events(3, "room.created");
    bad[1].event_type = "boom".to_string();
    let trapped = sink.publish(&bad).await;
    assert_eq!(trapped.len(), 3);
    // The call trapped; its events were published again in halves: the culprit alone carries
    // the trap, its neighbours got the plugin's own answer.
    let message = retryable_message(&trapped[1]);
    assert!(
        message.starts_with("plugin `chaos-trap` trapped: wasm trap:"),
        "{message}"
    );
    assert!(
        message.contains("chaos: event type boom in the batch"),
        "panic message kept: {message}"
    );
    for neighbour in [&trapped[0], &trapped[2]] {
        assert!(
            retryable_message(neighbour).starts_with("chaos retryable, call"),
            "{neighbour:?}"
        );
    }
    // The guest's panic went to outboxd's log as stderr of this sink.
    assert!(
        logs_of("chaos-trap").iter().any(|f| f["stream"] == "stderr"
            && f["message"].as_str().unwrap().contains("event type boom"))
    );

    // Every trapping call discarded its instance: the first one, [1, 2], then [1] alone.
    let built = sink.stats().instances_built;
    assert!(built >= 3, "{built}");
    let next = sink.publish(&events(1, "room.created")).await;
    assert!(
        retryable_message(&next[0]).starts_with("chaos retryable, call"),
        "{next:?}"
    );
}

#[tokio::test]
async fn too_few_results_fail_the_batch() {
    let sink = start(sink_config(
        "chaos-few",
        "chaos",
        &[("behaviour", "too_few")],
    ))
    .await;
    let outcomes = sink.publish(&events(3, "room.created")).await;
    // Halved down to each event alone, which still gets no result.
    assert_eq!(
        outcomes,
        vec![Outcome::retryable("plugin `chaos-few` returned 0 results for 1 events"); 3]
    );
    assert_eq!(
        sink.stats().idle_instances,
        0,
        "the instances are discarded"
    );
}

/// A guest that overruns its deadline whenever one event is in the call, with no time left in
/// the batch for halving: the call's halves are remembered, and each later publish of the events
/// still undelivered narrows the culprit down by one level, delivering the innocent half.
#[tokio::test]
async fn a_deadline_poison_is_narrowed_down_one_level_per_claim() {
    let mut config = sink_config("chaos-slowpoke", "chaos", &[("loop_on_type", "Slow")]);
    config.limits.publish_timeout = Duration::from_millis(200);
    let sink = PluginSink::start(&engine(), &SinkSpec::new(config).unwrap())
        .await
        .unwrap()
        .with_batch_budget(Duration::from_millis(300));
    let mut waiting = events(16, "room.created");
    waiting[11].event_type = "Slow".to_string();
    let mut delivered = 0;
    let mut rounds = 0;
    while waiting.len() > 1 {
        rounds += 1;
        assert!(rounds <= 6, "not narrowed down: {} waiting", waiting.len());
        let outcomes = sink.publish(&waiting).await;
        let mut next = Vec::new();
        for (event, outcome) in waiting.into_iter().zip(outcomes) {
            match outcome {
                Outcome::Delivered => delivered += 1,
                other => {
                    assert!(retryable_message(&other).contains("deadline"), "{other:?}");
                    next.push(event);
                }
            }
        }
        waiting = next;
    }
    // The first call and one level per later publish: 16 → 8 → 4 → 2 → 1.
    assert_eq!(rounds, 5);
    assert_eq!(delivered, 15);
    assert_eq!(waiting[0].event_type, "Slow");
    assert_eq!(
        sink.suspects(),
        0,
        "the culprit failed alone: nothing left to suspect"
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_max_retry_after_is_cut_to_it() {
    // Two hours asked; the default cap is one hour.
    let sink = start(sink_config(
        "chaos-park",
        "chaos",
        &[("rate_limited", "7200000")],
    ))
    .await;
    let outcomes = sink.publish(&events(1, "room.created")).await;
    assert_eq!(
        outcomes,
        vec![Outcome::Retryable {
            message: "chaos rate limited, call 1 (retry-after 2h cut to limits.max_retry_after 1h)"
                .to_string(),
            retry_after: Some(Duration::from_secs(3600)),
        }]
    );
    let mut config = sink_config("chaos-short", "chaos", &[("rate_limited", "1500")]);
    config.limits.max_retry_after = Duration::from_secs(1);
    let capped = start(config)
        .await
        .publish(&events(1, "room.created"))
        .await;
    assert!(
        matches!(&capped[0], Outcome::Retryable { retry_after: Some(d), .. } if *d == Duration::from_secs(1)),
        "{capped:?}"
    );
}

#[tokio::test]
async fn a_thousand_120k_events_fit_the_default_memory_cap() {
    let sink = start(sink_config("log-large", "log", &[])).await;
    let mut batch = events(1000, "room.created");
    for event in &mut batch {
        event.body = vec![b'g'; 120 * 1024];
    }
    let outcomes = sink.publish(&batch).await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 1000]);
}

#[tokio::test]
async fn an_event_above_max_event_size_fails_alone_without_a_call() {
    let mut config = sink_config("chaos-size", "chaos", &[("behaviour", "ok")]);
    config.limits.max_batch_bytes = Some(ByteSize(64 * 1024));
    config.limits.max_event_size = Some(ByteSize(16 * 1024));
    let sink = start(config).await;
    let mut batch = events(40, "room.created");
    batch[7].body = vec![b'b'; 20 * 1024];
    for event in batch.iter_mut().skip(10) {
        event.body = vec![b's'; 10 * 1024];
    }
    let outcomes = sink.publish(&batch).await;
    let size = outboxd::plugin::sink::event_size(&batch[7]);
    assert_eq!(
        outcomes[7],
        Outcome::permanent(format!(
            "event of {size} bytes exceeds sink `chaos-size`'s limits.max_event_size (16384 bytes)"
        ))
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Outcome::Delivered)
            .count(),
        39
    );
}

#[tokio::test]
async fn publish_errors_map_to_outcomes() {
    let limited = start(sink_config(
        "chaos-rate",
        "chaos",
        &[("rate_limited", "1500")],
    ))
    .await;
    assert_eq!(
        limited.publish(&events(1, "room.created")).await,
        vec![Outcome::Retryable {
            message: "chaos rate limited, call 1".to_string(),
            retry_after: Some(Duration::from_millis(1500)),
        }]
    );
    let permanent = start(sink_config(
        "chaos-perm",
        "chaos",
        &[("behaviour", "permanent")],
    ))
    .await;
    assert_eq!(
        permanent.publish(&events(1, "room.created")).await,
        vec![Outcome::permanent("chaos permanent, call 1")]
    );
    let retryable = start(sink_config(
        "chaos-retry",
        "chaos",
        &[("behaviour", "retryable")],
    ))
    .await;
    assert_eq!(
        retryable.publish(&events(1, "room.created")).await,
        vec![Outcome::retryable("chaos retryable, call 1")]
    );
    let ok = start(sink_config("chaos-ok", "chaos", &[("behaviour", "ok")])).await;
    assert_eq!(
        ok.publish(&events(2, "room.created")).await,
        vec![Outcome::Delivered; 2]
    );
}

// ---------------------------------------------------------------------------------------------
// Instance reuse and batch splitting
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn instances_are_reused_across_batches() {
    captured();
    let sink = start(sink_config(
        "chaos-reuse",
        "chaos",
        &[("behaviour", "retryable")],
    ))
    .await;
    for call in 1..=5 {
        let outcomes = sink.publish(&events(4, "room.created")).await;
        for outcome in &outcomes {
            assert_eq!(
                retryable_message(outcome),
                format!("chaos retryable, call {call}")
            );
        }
    }
    assert_eq!(
        sink.stats().instances_built,
        1,
        "one instance served every batch"
    );
    let logs = logs_of("chaos-reuse");
    assert!(
        logs.iter()
            .any(|f| f["message"] == "chaos call 5 with 4 events"),
        "logging import"
    );
    assert!(
        logs.iter()
            .any(|f| f["stream"] == "stdout" && f["message"] == "chaos stdout: call 5"),
        "guest stdout lands in the log: {logs:?}"
    );
}

#[tokio::test]
async fn batches_bigger_than_max_batch_size_are_split() {
    let mut config = sink_config("chaos-split", "chaos", &[("behaviour", "retryable")]);
    config.limits.max_batch_size = 2;
    let sink = start(config).await;
    let messages: Vec<String> = sink
        .publish(&events(5, "room.created"))
        .await
        .iter()
        .map(|o| retryable_message(o).to_string())
        .collect();
    let calls: Vec<&str> = messages
        .iter()
        .map(|m| m.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(calls, ["1", "1", "2", "2", "3"]);
}

// ---------------------------------------------------------------------------------------------
// World and version checks
// ---------------------------------------------------------------------------------------------

/// Writes `bytes` to a temp file named `name`, kept alive by the returned dir.
fn temp_file(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

/// `bytes` with every occurrence of `from` replaced by `to` (same length: the binary stays valid).
fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut hits = 0;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            hits += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(hits > 0, "pattern not found");
    out
}

async fn check_err(path: &Path) -> PluginError {
    check(path, &settings()).await.expect_err("check must fail")
}

#[tokio::test]
async fn files_that_are_not_components_are_rejected() {
    let missing = check_err(Path::new("/nonexistent/plugin.wasm")).await;
    assert!(matches!(missing, PluginError::Read { .. }), "{missing:?}");
    assert!(missing.to_string().contains("/nonexistent/plugin.wasm"));

    let (_d, text) = temp_file("text.wasm", b"hello, not wasm");
    let error = check_err(&text).await;
    assert!(
        matches!(error, PluginError::NotAComponent { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("not a WebAssembly binary"),
        "{error}"
    );

    let (_d, module) = temp_file("module.wasm", b"\0asm\x01\0\0\0");
    let error = check_err(&module).await;
    assert!(
        error.to_string().contains("core WebAssembly module"),
        "{error}"
    );
}

#[tokio::test]
async fn components_of_another_world_are_rejected() {
    // The smallest valid component: it exports nothing.
    let (_d, empty) = temp_file("empty.wasm", b"\0asm\x0d\0\x01\0");
    let error = check_err(&empty).await;
    assert!(matches!(error, PluginError::WrongWorld { .. }), "{error:?}");
    assert!(
        error.to_string().contains("missing export function `init`"),
        "{error}"
    );

    // The chaos plugin with its `publish` export renamed.
    let bytes = std::fs::read(plugin("chaos")).unwrap();
    let renamed = replace_all(&bytes, b"\x07publish", b"\x07publiss");
    let (_d, path) = temp_file("renamed.wasm", &renamed);
    let error = check_err(&path).await;
    assert!(
        error
            .to_string()
            .contains("missing export function `publish`"),
        "{error}"
    );
}

#[tokio::test]
async fn the_version_rule_loads_compatible_minors_and_refuses_other_tracks() {
    let bytes = std::fs::read(plugin("log")).unwrap();
    for (version, loads) in [("0.1.9", true), ("0.2.0", false), ("1.0.0", false)] {
        let rewritten = replace_all(&bytes, b"@0.1.2", format!("@{version}").as_bytes());
        let (_d, path) = temp_file("versioned.wasm", &rewritten);
        let result = check(&path, &settings()).await;
        if loads {
            let report = result.unwrap_or_else(|e| panic!("{version} must load: {e}"));
            assert_eq!(report.world.version.as_deref(), Some(version));
            let outcomes = test_plugin(&path, vec![], events(1, "x"), vec![], &settings())
                .await
                .unwrap();
            assert_eq!(outcomes, vec![Outcome::Delivered]);
        } else {
            let error = result
                .err()
                .unwrap_or_else(|| panic!("{version} must be refused"));
            assert!(matches!(error, PluginError::Version { .. }), "{error:?}");
            assert!(
                error.to_string().contains(&format!("@{version}"))
                    && error.to_string().contains("outbox:publisher@0.1.x"),
                "{error}"
            );
        }
    }
}

/// Plugins built against `outbox:publisher@0.1.0` and `0.1.1` load and run on this host as they
/// are: the Rust ones kept from then (tests/fixtures/wasm-0.1.0, tests/fixtures/wasm-0.1.1), the
/// Python and JavaScript ones built from their sources against 0.1.0 (`make plugins`:
/// plugins/out/compat/). They import no `trace` (added in 0.1.2), so they send no trace headers.
#[tokio::test]
async fn plugins_built_against_earlier_minors_load_unchanged() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let compat = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/out/compat");
    let webhook = vec![
        ("url", "http://127.0.0.1:9/hook"),
        ("secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    ];
    let cases = [
        (fixtures.join("wasm-0.1.0/log.wasm"), "0.1.0", vec![]),
        (compat.join("jsonl-log-0.1.0.wasm"), "0.1.0", vec![]),
        (
            fixtures.join("wasm-0.1.0/webhook.wasm"),
            "0.1.0",
            webhook.clone(),
        ),
        (
            compat.join("webhook-js-0.1.0.wasm"),
            "0.1.0",
            webhook.clone(),
        ),
        (
            fixtures.join("wasm-0.1.1/webhook.wasm"),
            "0.1.1",
            webhook.clone(),
        ),
    ];
    for (path, version, config) in cases {
        assert!(
            path.is_file(),
            "{} is missing: run `make plugins`",
            path.display()
        );
        let report = check(&path, &settings())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            report.world.version.as_deref(),
            Some(version),
            "{}",
            path.display()
        );
        let http = if config.is_empty() {
            vec![]
        } else {
            vec!["http://127.0.0.1:9".to_string()]
        };
        let config = config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let outcomes = test_plugin(&path, config, traced(1), http.clone(), &settings())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if http.is_empty() {
            assert_eq!(outcomes, vec![Outcome::Delivered], "{}", path.display());
        } else {
            // Nothing listens on port 9: the webhook runs, and its request fails as retryable.
            assert!(
                matches!(outcomes[0], Outcome::Retryable { .. }),
                "{}: {outcomes:?}",
                path.display()
            );
        }
    }
    // A broker plugin of 0.1.1 (the `broker-publisher` world) passes the checks too.
    let broker = check(&fixtures.join("wasm-0.1.1/broker.wasm"), &settings())
        .await
        .unwrap();
    assert_eq!(broker.world.version.as_deref(), Some("0.1.1"));
    assert!(broker.world.imports_broker());
}

/// Only plugins that publish to brokers import `broker` (so only they need a sink with
/// `limits.allow_brokers`): the Rust `broker` plugin and the Python `broker-json` example, not
/// the log plugin built from the same SDK in the same workspace build.
#[tokio::test]
async fn the_broker_plugin_imports_broker_and_the_log_plugin_does_not() {
    let broker = check(&plugin("broker"), &settings()).await.unwrap();
    assert!(broker.world.imports_broker(), "{:?}", broker.world.imports);
    assert!(!broker.world.imports_http());
    let log = check(&plugin("log"), &settings()).await.unwrap();
    assert!(!log.world.imports_broker(), "{:?}", log.world.imports);
    // The Python example targets broker-publisher too.
    let python = check(&plugin("broker-json"), &settings()).await.unwrap();
    assert!(python.world.imports_broker(), "{:?}", python.world.imports);
}

#[tokio::test]
async fn check_lists_imports_and_exports() {
    let report = check(&plugin("log"), &settings()).await.unwrap();
    assert_eq!(report.world.version.as_deref(), Some("0.1.2"));
    assert!(
        report
            .world
            .imports
            .iter()
            .any(|i| i == "outbox:publisher/logging@0.1.2")
    );
    assert!(
        report
            .world
            .imports
            .iter()
            .any(|i| i == "outbox:publisher/types@0.1.2")
    );
    assert_eq!(report.world.exports, ["init", "publish"]);
    let text = report.to_string();
    assert!(
        text.contains("world:   outbox:publisher/publisher@0.1.2: ok"),
        "{text}"
    );
    assert!(text.contains("  outbox:publisher/logging@0.1.2"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Routing and load-time validation
// ---------------------------------------------------------------------------------------------

/// `sinks` and `routes` as config loading checks them.
fn publishing(sinks: &[SinkConfig], routes: &[RouteConfig]) -> Publishing {
    Publishing::new(sinks.to_vec(), routes.to_vec(), Path::new("")).expect("valid sinks")
}

fn route(event_type: &str, sink: &str) -> RouteConfig {
    RouteConfig {
        event_type: event_type.to_string(),
        sink: sink.to_string(),
    }
}

#[tokio::test]
async fn routes_pick_the_first_match_and_unrouted_events_fail_permanently() {
    let sinks = [
        sink_config("rooms", "chaos", &[("behaviour", "retryable")]),
        sink_config("deletions", "chaos", &[("behaviour", "permanent")]),
    ];
    let routes = [route("room.*", "rooms"), route("*.deleted", "deletions")];
    let publisher = load_publisher(&publishing(&sinks, &routes), &settings())
        .await
        .unwrap();
    let batch = vec![
        event(0, "room.created"),
        event(1, "user.deleted"),
        event(2, "room.deleted"), // both match: the first route wins
        event(3, "user.created"),
        event(4, "room.closed"),
    ];
    let outcomes = publisher.publish(&batch).await;
    assert_eq!(
        outcomes,
        vec![
            Outcome::retryable("chaos retryable, call 1"),
            Outcome::permanent("chaos permanent, call 1"),
            Outcome::retryable("chaos retryable, call 1"),
            Outcome::permanent("no route for event type `user.created`"),
            Outcome::retryable("chaos retryable, call 1"),
        ]
    );
}

#[tokio::test]
async fn bad_config_is_one_clear_error_at_start() {
    let s = settings();
    // Names, routes and limits are checked once, by config loading.
    let duplicate = vec![sink_config("a", "log", &[]), sink_config("a", "chaos", &[])];
    let error = Publishing::new(duplicate, Vec::new(), Path::new("")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config key `sink[1].name`: sink `a` is defined twice"
    );

    let error = Publishing::new(
        vec![sink_config("a", "log", &[])],
        vec![route("room.*", "b")],
        Path::new(""),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config key `route[0].sink`: unknown sink `b` (no [[sink]] with that name)"
    );

    let mut missing = sink_config("a", "log", &[]);
    missing.plugin = PathBuf::from("/nonexistent/a.wasm");
    let error = load_publisher(&publishing(&[missing], &[]), &s)
        .await
        .err()
        .unwrap();
    assert!(
        error
            .to_string()
            .starts_with("cannot read plugin /nonexistent/a.wasm"),
        "{error}"
    );

    let failing = sink_config("a", "chaos", &[("init_error", "missing api key")]);
    let error = load_publisher(&publishing(&[failing], &[]), &s)
        .await
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "sink `a`: plugin init failed: chaos plugin: missing api key"
    );

    let mut zero = sink_config("a", "log", &[]);
    zero.limits.max_batch_size = 0;
    let error = SinkSpec::new(zero).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config key `sink.limits.max_batch_size`: must be at least 1"
    );
}

#[tokio::test]
async fn router_works_with_any_publisher() {
    struct Native;
    #[async_trait::async_trait]
    impl Publisher for Native {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            batch.iter().map(|_| Outcome::Delivered).collect()
        }
    }
    let router = RoutedPublisher::new(vec![Route {
        event_type: "*".into(),
        sink: "native".into(),
        publisher: Arc::new(Native),
    }]);
    assert_eq!(router.route("anything.at.all"), Some("native"));
    assert_eq!(
        router.publish(&events(3, "x")).await,
        vec![Outcome::Delivered; 3]
    );
}

/// A plugin writing 3 × 2,000 lines and a 1 MiB line per call is held to the sink's
/// `log_lines_per_second` (burst = the rate) and `log_line_max`; the dropped lines are reported
/// as "N plugin log lines suppressed"; the events are still delivered. Each line is a host call:
/// on a loaded machine a call took over the default 15 s `publish_timeout`, which this test
/// does not test, so it is raised.
#[tokio::test]
async fn a_flooding_plugin_is_held_to_its_log_limits() {
    const FLOOD: u64 = 2_000;
    captured();
    let flood = FLOOD.to_string();
    let mut config = sink_config("chaos-flood", "chaos", &[("flood", &flood)]);
    config.limits.log_lines_per_second = 20;
    config.limits.log_line_max = ByteSize(256);
    config.limits.publish_timeout = Duration::from_secs(120);
    let sink = start(config).await;
    let started = Instant::now();
    for _ in 0..2 {
        assert_eq!(
            sink.publish(&events(3, "x")).await,
            vec![Outcome::Delivered; 3]
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let logs = logs_of("chaos-flood");
    let (reports, lines): (Vec<_>, Vec<_>) = logs
        .iter()
        .partition(|fields| fields["suppressed"].is_u64());
    // The burst of 20, then 20 a second while the two calls of 3 × FLOOD + 1 lines each run.
    let allowed = 20 + (20.0 * elapsed).ceil() as usize + 1;
    assert!(
        (20..=allowed).contains(&lines.len()),
        "{} lines got through in {elapsed:.1}s (allowed {allowed})",
        lines.len()
    );
    let suppressed: u64 = reports
        .iter()
        .map(|f| f["suppressed"].as_u64().unwrap())
        .sum();
    assert!(
        suppressed + lines.len() as u64 >= 2 * (3 * FLOOD + 1) - 4,
        "{suppressed} suppressed"
    );
    assert!(reports.iter().all(|f| {
        f["message"]
            .as_str()
            .unwrap()
            .contains("plugin log lines suppressed (limits.log_lines_per_second = 20)")
    }));
    for fields in &lines {
        let message = fields["message"].as_str().unwrap();
        assert!(message.len() <= 256 + 40, "{} bytes", message.len());
    }
    let cut = lines
        .iter()
        .filter(|f| {
            f["message"]
                .as_str()
                .unwrap()
                .ends_with("… [rest of line dropped]")
        })
        .count();
    assert!(
        cut >= 1,
        "the 1 MiB line of the first call, cut to 256 bytes"
    );
}

// ---------------------------------------------------------------------------------------------
// Precompiled-artifact cache
// ---------------------------------------------------------------------------------------------

/// Hosts started together on one machine (here three engines over one cache, as three processes
/// would be) compile a plugin once: the first compiles and stores it, the others wait for its
/// lock and load what it stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_starting_together_compile_a_plugin_once() {
    let dir = tempfile::tempdir().unwrap();
    let settings = PluginSettings {
        cache_dir: Some(dir.path().join("cache")),
        ..PluginSettings::default()
    };
    let engines: Vec<PluginEngine> = (0..3)
        .map(|_| PluginEngine::new(&settings).unwrap())
        .collect();
    let webhook = plugin("webhook");
    let compiled = futures::future::join_all(engines.iter().map(|e| e.compile(&webhook))).await;
    let mut outcomes: Vec<String> = compiled
        .into_iter()
        .map(|c| format!("{:?}", c.unwrap().cache))
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["Hit", "Hit", "Stored"]);
}

#[tokio::test]
async fn second_load_hits_the_cache_and_bad_artifacts_are_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let settings = PluginSettings {
        cache_dir: Some(dir.path().join("cache")),
        ..PluginSettings::default()
    };
    let first = PluginEngine::new(&settings)
        .unwrap()
        .compile(&plugin("log"))
        .await
        .unwrap();
    assert_eq!(first.cache, CacheOutcome::Stored);
    let second = PluginEngine::new(&settings)
        .unwrap()
        .compile(&plugin("log"))
        .await
        .unwrap();
    assert_eq!(second.cache, CacheOutcome::Hit);

    // A tampered artifact fails its checksum and is recompiled, never loaded.
    let cache = dir.path().join("cache");
    let artifact = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .unwrap();
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&artifact, bytes).unwrap();
    let third = PluginEngine::new(&settings)
        .unwrap()
        .compile(&plugin("log"))
        .await
        .unwrap();
    assert_eq!(third.cache, CacheOutcome::Stored);

    // An existing empty directory (systemd's `CacheDirectory=` makes one, mode 0755) is adopted:
    // marker written, made private, artifacts stored.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o755)).unwrap();
        let adopted = PluginEngine::new(&PluginSettings {
            cache_dir: Some(empty.clone()),
            ..PluginSettings::default()
        })
        .unwrap()
        .compile(&plugin("log"))
        .await
        .unwrap();
        assert_eq!(adopted.cache, CacheOutcome::Stored);
        let mode = std::fs::metadata(&empty).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(empty.join("OUTBOXD_PLUGIN_CACHE").is_file());
    }

    // A directory with files this host did not create is refused, the reason said once.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("something.cwasm"), b"not ours").unwrap();
    let error = PluginEngine::new(&PluginSettings {
        cache_dir: Some(foreign),
        ..PluginSettings::default()
    })
    .err()
    .unwrap();
    assert!(
        error.to_string().contains("not created by outboxd"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------------
// `outboxd plugin test` helpers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn plugin_test_runs_init_and_publish_and_prints_outcomes() {
    let config = vec![parse_config_pair("rate_limited=250").unwrap()];
    assert!(parse_config_pair("no-equals").is_err());
    let events = vec![
        parse_event_json(0, r#"{"event_type":"room.created","body":"hi"}"#).unwrap(),
        parse_event_json(1, r#"{"event_id":"e2","body_base64":"AAE="}"#).unwrap(),
    ];
    assert_eq!(events[0].event_id, "evt_sample_0");
    assert_eq!(events[0].body, b"hi");
    assert_eq!(events[1].event_type, "RoomGiftSent");
    assert_eq!(events[1].body, [0, 1]);
    assert!(parse_event_json(2, r#"{"bogus":1}"#).is_err());
    // A trace context for the plugin's `trace` import, checked as a producer's is.
    let traced = parse_event_json(
        3,
        r#"{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"k=v"}"#,
    )
    .unwrap();
    assert_eq!(
        traced
            .trace
            .map(|t| (t.trace_id().to_string(), t.tracestate().to_string())),
        Some(("4bf92f3577b34da6a3ce929d0e0e4736".into(), "k=v".into()))
    );
    let bad = parse_event_json(4, r#"{"traceparent":"00-abc-01"}"#).unwrap_err();
    assert!(bad.to_string().contains("traceparent"), "{bad}");
    let lone = parse_event_json(5, r#"{"tracestate":"k=v"}"#).unwrap_err();
    assert!(lone.to_string().contains("needs a `traceparent`"), "{lone}");

    let outcomes = test_plugin(
        &plugin("chaos"),
        config,
        events.clone(),
        vec![],
        &settings(),
    )
    .await
    .unwrap();
    let printed = TestReport {
        events: &events,
        outcomes: &outcomes,
    }
    .to_string();
    assert_eq!(
        printed,
        "evt_sample_0\troom.created\tretryable after 250ms: chaos rate limited, call 1\n\
         e2\tRoomGiftSent\tretryable after 250ms: chaos rate limited, call 1"
    );
}
