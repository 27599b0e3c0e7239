//! Hot reload on SQLite, MariaDB and PostgreSQL: a sink's plugin file is replaced under load
//! (the log plugin swapped for the webhook plugin) and `POST /reload` starts the new set beside
//! the old. Nothing is lost, every event enqueued after the swap goes to the new plugin (none is
//! published by the discarded instance), and refused reloads (a restart-only key, a broken
//! plugin) keep the running set serving.

use crate::{fixtures, http, support};

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use outboxd::config::Config;
use outboxd::record::now_ms;
use outboxd::reload::ConfigSource;
use outboxd::service::Service;
use outboxd::store::{OutboxStore, StatusCounts};
use outboxd::worker::RunMode;
use support::{Backend, TestDb, record, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(60);
const WEBHOOK_SECRET: &str = "whsec_ZTJlLXdlYmhvb2stc2lnbmluZy1rZXk=";
/// The sink's name (tags the log plugin's lines).
const SINK: &str = "reloading";

async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.split(' ').nth(1).unwrap().parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Polls the store's counts until `done` holds (no event may fail meanwhile), or panics with
/// `what` after [`DEADLINE`].
async fn until_counts(
    what: &str,
    store: &Arc<dyn OutboxStore>,
    done: impl Fn(&StatusCounts) -> bool,
) {
    wait_until(what, DEADLINE, || async {
        let c = support::status_counts(store).await;
        assert_eq!(c.failed, 0, "events failed: {c:?}");
        if done(&c) { Ok(()) } else { Err(c) }
    })
    .await
}

/// Writes the config: the sink runs `sink.wasm` (a copy of the plugin in use) with `sink_extra`.
fn write_config(dir: &Path, database_extra: &str, sink_extra: &str) -> PathBuf {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[database]
{database_extra}

[worker]
app_codes = ["default"]
batch_size = 20
concurrency = 2
poll_interval = "20ms"

[admin]
listen = "127.0.0.1:0"

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "{SINK}"

[[sink]]
name = "{SINK}"
plugin = "sink.wasm"
{sink_extra}
"#,
        cache = fixtures::settings().cache_dir.unwrap().display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn events(prefix: &str, n: i64) -> Vec<outboxd::record::Record> {
    let now = now_ms();
    (0..n)
        .map(|i| {
            record(
                "default",
                &format!("{prefix}{i:04}"),
                &format!("r{}", i % 7),
                now + i,
            )
        })
        .collect()
}

/// Event ids the log plugin printed for the sink.
fn logged_ids() -> BTreeSet<String> {
    fixtures::logs_of(SINK)
        .iter()
        .filter_map(|fields| {
            serde_json::from_str::<serde_json::Value>(fields["message"].as_str()?).ok()
        })
        .filter_map(|line| line["event_id"].as_str().map(String::from))
        .collect()
}

async fn swap_a_plugin_file_under_load(backend: Backend) {
    fixtures::captured();
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    // Both plugins compiled into the shared cache first, so the reload is quick (a cache hit and
    // `init`) and lands while the first wave is still being delivered.
    let engine = fixtures::engine();
    for plugin in ["log", "webhook"] {
        engine.compile(&fixtures::plugin(plugin)).await.unwrap();
    }
    let tag = format!("{backend:?}").to_lowercase();
    let store = db.store_default().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures::plugin("log"), dir.path().join("sink.wasm")).unwrap();
    let config_path = write_config(
        dir.path(),
        "",
        // One log line per event: the plugin log cap must let every one through.
        r#"config = { format = "json" }
limits = { log_lines_per_second = 1000000 }"#,
    );
    let source: ConfigSource = {
        let path = config_path.clone();
        Arc::new(move || Config::load(Some(&path), std::iter::empty()).map_err(|e| e.to_string()))
    };
    let config = source().unwrap();
    let service = Service::bind(config, store.clone())
        .await
        .unwrap()
        .with_reload(source);
    let addr = service.admin_addr().unwrap();
    let receiver = http::WebhookReceiver::start(&[WEBHOOK_SECRET]).await;

    let first = events(&format!("{tag}-a"), 3000);
    store.enqueue(&first).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service.run(RunMode::Forever, shutdown.clone()));
    until_counts("the first wave to be under way", &store, |c| {
        c.delivered >= 100
    })
    .await;

    // Swap the plugin file and its config under load, then reload.
    let webhook = format!(
        r#"config = {{ url = "{url}", secret = "{WEBHOOK_SECRET}" }}
limits = {{ allow_hosts = ["http://{addr}"] }}"#,
        url = receiver.url(),
        addr = receiver.addr()
    );
    std::fs::copy(fixtures::plugin("webhook"), dir.path().join("sink.wasm")).unwrap();
    write_config(dir.path(), "", &webhook);
    let (status, body) = request(addr, "POST", "/reload").await;
    assert_eq!(
        (status, body.trim()),
        (200, "reloaded: 1 sinks (reloading), 1 routes")
    );
    let under_way = support::status_counts(&store).await;
    assert!(
        under_way.delivered < 3000,
        "the first wave was done before the swap: no load to swap under"
    );

    let second = events(&format!("{tag}-b"), 300);
    store.enqueue(&second).await.unwrap();
    until_counts("both waves delivered", &store, |c| c.delivered == 3300).await;

    let logged = logged_ids();
    let posted = receiver.delivered_ids();
    for record in &second {
        assert!(
            !logged.contains(&record.event_id),
            "{} (enqueued after the swap) was published by the discarded log instance",
            record.event_id
        );
        assert_eq!(
            receiver.delivered_count(&record.event_id),
            1,
            "{}",
            record.event_id
        );
    }
    for record in &first {
        assert!(
            logged.contains(&record.event_id) || posted.contains(&record.event_id),
            "{} lost",
            record.event_id
        );
    }
    assert!(
        first.iter().any(|r| logged.contains(&r.event_id))
            && first.iter().any(|r| posted.contains(&r.event_id)),
        "the first wave did not straddle the swap"
    );

    // A restart-only key is refused by name; the running set keeps serving.
    write_config(dir.path(), r#"url = "sqlite://elsewhere.db""#, &webhook);
    let (status, body) = request(addr, "POST", "/reload").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("database.url"), "{body}");
    assert_eq!(body.trim().lines().count(), 1, "{body}");
    // A broken plugin file is refused with one line naming it.
    std::fs::write(dir.path().join("sink.wasm"), b"not a component").unwrap();
    write_config(dir.path(), "", &webhook);
    let (status, body) = request(addr, "POST", "/reload").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("sink.wasm"), "{body}");
    assert_eq!(body.trim().lines().count(), 1, "{body}");
    let third = events(&format!("{tag}-c"), 50);
    store.enqueue(&third).await.unwrap();
    until_counts("the third wave delivered", &store, |c| c.delivered == 3350).await;
    for record in &third {
        assert_eq!(
            receiver.delivered_count(&record.event_id),
            1,
            "{}",
            record.event_id
        );
    }

    shutdown.cancel();
    running.await.unwrap().expect("service stops cleanly");
}

support::per_backend!(swap_a_plugin_file_under_load);
