//! The plugin author kit end to end, through the `outboxd` binary: the Python plugin
//! (`jsonl-log`, componentize-py) and the JavaScript plugin (`webhook-js`, componentize-js, over
//! the host's allowlisted wasi:http to a real Standard Webhooks receiver on loopback) deliver
//! enqueued events with `outboxd run --drain` on SQLite; `outboxd plugin test` reports each
//! outcome; the `broker` plugin runs under `outboxd plugin test` against its stand-in broker
//! (confirmed, refused as each kind refuses, down); `outboxd plugin new` projects in Rust,
//! Python and JavaScript build with `make` and pass `outboxd plugin test`; `outboxd plugin bench`
//! measures a plugin.
//!
//! Needs `make plugins` (which installs the Python and JavaScript toolchains into
//! `.toolchains/`). Every `outboxd` process of the test run shares one precompiled-artifact cache
//! (`fixtures::settings`), so each large component is compiled once.

use crate::{fixtures, http};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use http::{Reply, WebhookReceiver};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn outboxd() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outboxd"));
    command
        .env_remove("OUTBOXD_DATABASE_URL")
        // Tests run in parallel: no admin listener on the fixed default port.
        .env("OUTBOXD_ADMIN_LISTEN", "")
        .env("XDG_CACHE_HOME", fixtures::cache_home())
        .env("RUST_LOG", "info");
    command
}

/// `outboxd --config CONFIG --database-url sqlite://DIR/outboxd.db`, ready for a subcommand.
fn with(config: &Path) -> Command {
    let db = config.with_file_name("outboxd.db");
    let mut command = outboxd();
    command
        .arg("--config")
        .arg(config)
        .args(["--database-url", &format!("sqlite://{}", db.display())]);
    command
}

fn run(command: &mut Command) -> Output {
    command.output().expect("spawn")
}

fn run_ok(command: &mut Command) -> Output {
    let output = run(command);
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A config routing every event to one sink (`sink_toml` is its `[[sink]]` body).
fn write_config(dir: &Path, sink_toml: &str) -> PathBuf {
    let path = dir.join("outboxd.toml");
    let config = format!(
        r#"
[worker]
poll_interval = "50ms"

[retry]
strategy = "fixed_interval"
interval = "1s"
max_attempts = 3

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "kit"

[[sink]]
name = "kit"
{sink_toml}
"#,
        cache = fixtures::cache_home().join("outboxd").display()
    );
    std::fs::write(&path, config).unwrap();
    path
}

fn status(config: &Path) -> serde_json::Value {
    serde_json::from_slice(&run_ok(with(config).args(["status", "--json"])).stdout).unwrap()
}

fn enqueue(config: &Path, event_type: &str, count: u32, body: &str) {
    run_ok(with(config).args([
        "enqueue",
        "--room",
        "room-1",
        "--type",
        event_type,
        "--count",
        &count.to_string(),
        "--body-json",
        body,
    ]));
}

#[test]
fn python_jsonl_log_delivers_end_to_end_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "plugin = \"{}\"\nconfig = {{ body = \"text\" }}",
            fixtures::plugin("jsonl-log").display()
        ),
    );
    run_ok(with(&config).arg("migrate"));
    enqueue(&config, "RoomGiftSent", 40, r#"{"gift":"rose"}"#);
    enqueue(&config, "RoomMicChanged", 10, r#"{"seat":2}"#);
    let output = run_ok(with(&config).args(["run", "--drain"]));
    let log = text(&output.stderr);
    let gifts = log
        .lines()
        .filter(|line| line.contains(r#""event_type":"RoomGiftSent""#))
        .filter(|line| line.contains(r#""body_text":"{\"gift\":\"rose\"}""#))
        .count();
    assert_eq!(gifts, 40, "one JSON line per gift event:\n{log}");
    let s = status(&config);
    assert_eq!(s["delivered"], 50, "{s}");
    assert_eq!(s["pending"], 0, "{s}");
    assert_eq!(s["failed"], 0, "{s}");
}

#[test]
fn python_plugin_test_reports_each_outcome_and_init_errors() {
    let plugin = fixtures::plugin("jsonl-log");
    let output = run_ok(
        outboxd()
            .args(["plugin", "test"])
            .arg(&plugin)
            .args(["--config", "body=text"])
            .args(["--event", r#"{"event_id":"a","body":"hi"}"#])
            .args(["--event", r#"{"event_id":"b","body_base64":"/w=="}"#]),
    );
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "a\tRoomGiftSent\tdelivered", "{stdout}");
    assert!(
        lines[1].starts_with(
            "b\tRoomGiftSent\tfailed (permanent): jsonl-log: event b: body is not UTF-8 text"
        ),
        "{stdout}"
    );
    assert!(text(&output.stderr).contains(r#""body_text":"hi""#));

    let bad = run(outboxd()
        .args(["plugin", "test"])
        .arg(&plugin)
        .args(["--config", "level=loud"]));
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains(
            "plugin init failed: jsonl-log plugin: unknown level `loud`: use `debug`, `info` or `warn`"
        ),
        "{}",
        text(&bad.stderr)
    );
}

/// Runs `command` off the async runtime (the receiver keeps serving meanwhile).
async fn run_blocking(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || run(&mut command))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_webhook_delivers_end_to_end_on_sqlite_through_allowlisted_wasi_http() {
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let dir = tempfile::tempdir().unwrap();
    let sink = |allow: &str| {
        format!(
            "plugin = \"{}\"\nconfig = {{ url = \"{}\", secret = \"{SECRET}\" }}\nlimits = {{ allow_hosts = [{allow}] }}",
            fixtures::plugin("webhook-js").display(),
            receiver.url()
        )
    };
    let config = write_config(
        dir.path(),
        &sink(&format!("\"http://{}\"", receiver.addr())),
    );
    run_ok(with(&config).arg("migrate"));
    enqueue(&config, "RoomGiftSent", 25, r#"{"gift":"rose"}"#);
    let mut drain = with(&config);
    drain.args(["run", "--drain"]);
    let output = run_blocking(drain).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let s = status(&config);
    assert_eq!(s["delivered"], 25, "{s}\n{}", text(&output.stderr));
    assert_eq!(receiver.delivered_ids().len(), 25);
    assert!(
        receiver.rejected().is_empty(),
        "bad signatures: {:?}",
        receiver.rejected()
    );
    let delivery = &receiver.deliveries()[0];
    assert_eq!(delivery.content_type.as_deref(), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(body["event_id"], delivery.id);
    assert_eq!(body["event_type"], "RoomGiftSent");
    assert_eq!(body["body"], "eyJnaWZ0Ijoicm9zZSJ9", "body base64");

    // 410: the row fails at once, with the status in last_error.
    receiver.script(1, Reply::status(410));
    enqueue(&config, "RoomGone", 1, "{}");
    let mut drain = with(&config);
    drain.args(["run", "--drain"]);
    assert!(run_blocking(drain).await.status.success());
    let failed: serde_json::Value =
        serde_json::from_slice(&run_ok(with(&config).args(["failed", "list", "--json"])).stdout)
            .unwrap();
    let reason = failed[0]["last_error"].as_str().unwrap_or_default();
    assert!(reason.starts_with("webhook-js: HTTP 410"), "{failed}");

    // No network without allow_hosts: the sink is refused at start.
    let closed = write_config(dir.path(), &sink(""));
    let refused = run(with(&closed).args(["run", "--drain"]));
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("set `limits.allow_hosts`"),
        "{}",
        text(&refused.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_webhook_plugin_test_delivers_and_denied_origins_never_leave_the_host() {
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let test = |allow: String| {
        let mut command = outboxd();
        command
            .args(["plugin", "test"])
            .arg(fixtures::plugin("webhook-js"))
            .args(["--allow-host", &allow])
            .args(["--config", &format!("url={}", receiver.url())])
            .args(["--config", &format!("secret={SECRET}")])
            .args(["--event", r#"{"event_id":"evt-1","body":"hi"}"#]);
        command
    };
    let output = run_blocking(test(format!("http://{}", receiver.addr()))).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim(),
        "evt-1\tRoomGiftSent\tdelivered"
    );
    assert_eq!(receiver.delivered_count("evt-1"), 1);

    let output = run_blocking(test("http://127.0.0.1:9".to_string())).await;
    let stdout = text(&output.stdout);
    // componentize-js's fetch reports the host's refusal as a generic network error, or its
    // event loop aborts (a trap): either way the event is retryable, never delivered.
    assert!(
        stdout.starts_with("evt-1\tRoomGiftSent\tretryable: "),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        text(&output.stderr).contains("not in the sink's limits.allow_hosts"),
        "the host logs the refusal: {}",
        text(&output.stderr)
    );
    assert_eq!(
        receiver.request_count(),
        1,
        "the denied request never left the host"
    );
}

/// `outboxd plugin test` of the shipped `broker` plugin (`payload = body`) on two events, with
/// `extra` arguments (the stand-in broker's flags).
fn broker_plugin_test(extra: &[&str]) -> Output {
    run(outboxd()
        .args(["plugin", "test"])
        .arg(fixtures::plugin("broker"))
        .args(["--config", "payload=body"])
        .args([
            "--event",
            r#"{"event_id":"evt-1","room_id":"r-7","occurred_at_ms":1700000000000,"body":"hello"}"#,
        ])
        .args([
            "--event",
            r#"{"event_id":"evt-2","event_type":"RoomMicChanged","room_id":"r-8","room_version":4,"occurred_at_ms":1700000000001,"body":"hi!"}"#,
        ])
        .args(extra))
}

/// What the stand-in broker prints for the two events of [`broker_plugin_test`].
const BROKER_MESSAGES: &str = "\
message evt-1
  destination: outbox.default.RoomGiftSent
  key:         r-7
  header:      event-id: evt-1
  header:      event-type: RoomGiftSent
  header:      app-code: default
  header:      room-id: r-7
  header:      room-version: 1
  header:      occurred-at-ms: 1700000000000
  header:      content-type: application/octet-stream
  payload:     5 bytes
message evt-2
  destination: outbox.default.RoomMicChanged
  key:         r-8
  header:      event-id: evt-2
  header:      event-type: RoomMicChanged
  header:      app-code: default
  header:      room-id: r-8
  header:      room-version: 4
  header:      occurred-at-ms: 1700000000001
  header:      content-type: application/octet-stream
  payload:     3 bytes
";

#[test]
fn broker_plugin_test_prints_each_message_and_delivers_when_the_stand_in_confirms() {
    let output = broker_plugin_test(&["--config", "connection=events"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        format!(
            "stand-in broker `events` (nats) answering confirmed: 2 messages received\n\
             {BROKER_MESSAGES}\
             evt-1\tRoomGiftSent\tdelivered\n\
             evt-2\tRoomMicChanged\tdelivered\n"
        )
    );

    // A key the plugin leaves out, a name the plugin's `connection` and `--broker` agree on.
    let output = run_ok(
        outboxd()
            .args(["plugin", "test"])
            .arg(fixtures::plugin("broker"))
            .args(["--config", "connection=rabbit", "--config", "key="])
            .args([
                "--config",
                "headers=false",
                "--config",
                "topic=rooms.{room_id}",
            ])
            .args(["--broker", "rabbit", "--broker-kind", "rabbitmq"])
            .args(["--event", r#"{"occurred_at_ms":1700000000000}"#]),
    );
    assert_eq!(
        text(&output.stdout),
        "stand-in broker `rabbit` (rabbitmq) answering confirmed: 1 message received\n\
         message evt_sample_0\n  \
         destination: rooms.room-1\n  \
         key:         (none)\n  \
         payload:     54 bytes\n\
         evt_sample_0\tRoomGiftSent\tdelivered\n"
    );
}

#[test]
fn broker_plugin_test_gives_each_kinds_refusal_and_retries_when_the_stand_in_is_down() {
    let refusals = [
        (
            "nats",
            "retryable: broker `nats`: NATS: no stream found for given subject (create a \
             JetStream stream that takes the subject)",
        ),
        (
            "rabbitmq",
            "retryable: broker `rabbitmq`: RabbitMQ refused the message (nack)",
        ),
        (
            "redis",
            "failed (permanent): Redis refused XADD: \"WRONGTYPE\": Operation against a key \
             holding the wrong kind of value",
        ),
        (
            "mqtt",
            "failed (permanent): MQTT broker refused: NotAuthorized",
        ),
        (
            "kafka",
            "failed (permanent): Kafka refused the record: TopicAuthorizationFailed",
        ),
    ];
    for (kind, outcome) in refusals {
        let connection = format!("connection={kind}");
        let output = broker_plugin_test(&[
            "--config",
            &connection,
            "--broker",
            kind,
            "--broker-kind",
            kind,
            "--broker-answer",
            "refused",
        ]);
        assert!(output.status.success(), "{kind}: {}", text(&output.stderr));
        assert_eq!(
            text(&output.stdout),
            format!(
                "stand-in broker `{kind}` ({kind}) answering refused: 2 messages received\n\
                 {BROKER_MESSAGES}\
                 evt-1\tRoomGiftSent\t{outcome}\n\
                 evt-2\tRoomMicChanged\t{outcome}\n"
            ),
            "{kind}"
        );
    }

    let output = broker_plugin_test(&[
        "--config",
        "connection=events",
        "--broker-kind",
        "kafka",
        "--broker-answer",
        "down",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let unreachable = "retryable: broker `events` (kafka) is unreachable: connection refused";
    assert_eq!(
        text(&output.stdout),
        format!(
            "stand-in broker `events` (kafka) answering down: 0 messages received\n\
             evt-1\tRoomGiftSent\t{unreachable}\n\
             evt-2\tRoomMicChanged\t{unreachable}\n"
        )
    );

    // A connection the stand-in is not: the sink may not use it, as on a real host.
    let output = broker_plugin_test(&["--config", "connection=elsewhere"]);
    let refused = "failed (permanent): sink `test` may not publish on broker `elsewhere`: it is \
                   not in the sink's limits.allow_brokers (events)";
    assert_eq!(
        text(&output.stdout),
        format!(
            "stand-in broker `events` (nats) answering confirmed: 0 messages received\n\
             evt-1\tRoomGiftSent\t{refused}\n\
             evt-2\tRoomMicChanged\t{refused}\n"
        )
    );
}

#[test]
fn new_plugins_in_every_language_build_and_pass_plugin_test() {
    let dir = tempfile::tempdir().unwrap();
    let toolchains = repo().join(".toolchains");
    for lang in ["rust", "python", "js"] {
        let name = format!("hello-{lang}");
        let project = dir.path().join(&name);
        let created = run_ok(
            outboxd()
                .args(["plugin", "new", &name, "--lang", lang, "--dir"])
                .arg(&project),
        );
        assert!(text(&created.stdout).contains("README.md"));
        let output = run_ok(
            Command::new("make")
                .arg("-C")
                .arg(&project)
                .args(["build", "test"])
                .arg(format!("OUTBOXD={}", env!("CARGO_BIN_EXE_outboxd")))
                .arg(format!(
                    "COMPONENTIZE_PY={}",
                    toolchains.join("python/bin/componentize-py").display()
                ))
                .arg(format!(
                    "COMPONENTIZE_JS={}",
                    toolchains
                        .join("js/node_modules/.bin/componentize-js")
                        .display()
                ))
                // The plugins workspace's target dir: same profile, so the SDK's dependencies
                // are already built.
                .arg(format!(
                    "CARGO_TARGET_DIR={}",
                    repo().join("plugins/target").display()
                ))
                .env("RUST_LOG", "info"),
        );
        let stdout = text(&output.stdout);
        assert!(
            stdout.contains("evt_sample_0\tRoomGiftSent\tdelivered"),
            "{lang}: {stdout}"
        );
        assert!(
            text(&output.stderr).contains("hello: RoomGiftSent evt_sample_0 room=room-1 (2 bytes)"),
            "{lang}: {}",
            text(&output.stderr)
        );
    }
}

#[test]
fn plugin_bench_measures_a_plugin_without_a_database() {
    let output = run_ok(
        outboxd()
            .env_remove("RUST_LOG")
            .args(["plugin", "bench"])
            .arg(fixtures::plugin("log"))
            .args(["--events", "2000", "--batch-size", "100"]),
    );
    let stdout = text(&output.stdout);
    assert!(stdout.contains("2000 events in batches of 100"), "{stdout}");
    assert!(stdout.contains("events/s"), "{stdout}");
    assert!(
        stdout.contains("outcomes:   2000 delivered, 0 retryable, 0 permanent"),
        "{stdout}"
    );
    assert!(
        !text(&output.stderr).contains("event_id"),
        "plugin log lines are not printed"
    );

    let failing = run_ok(
        outboxd()
            .args(["plugin", "bench"])
            .arg(fixtures::plugin("chaos"))
            .args(["--config", "behaviour=permanent", "--events", "10"]),
    );
    let stdout = text(&failing.stdout);
    assert!(
        stdout.contains("0 delivered, 0 retryable, 10 permanent"),
        "{stdout}"
    );
    assert!(
        stdout.contains("first non-delivered: chaos permanent, call 2"),
        "{stdout}"
    );
}
