//! Running outboxd as a service, on SQLite, MariaDB and PostgreSQL: the admin listener
//! (`/metrics`, `/healthz`, `/readyz`) over a real worker and the real log plugin, readiness
//! turning 503 when the database stops answering, and the circuit breaker carrying events
//! through a webhook outage longer than `max_attempts` retries would last.

use crate::{fixtures, http, support};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use outboxd::config::{BreakerSettings, Config, Publishing, RouteConfig, SinkConfig, SinkLimits};
use outboxd::metrics::{Metrics, RowOutcome};
use outboxd::plugin::load_publisher_with_metrics;
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::service::Service;
use outboxd::store::DeliveryOrder;
use outboxd::worker::{RunMode, Worker, WorkerOptions};
use support::{Backend, TestDb, record, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// How long a scenario may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(30);

/// `(status, body)` of one plain HTTP/1.1 request to the admin listener.
async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A config serving app `default` through the log plugin, admin listener on a free port.
fn service_config(dir: &Path) -> Config {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[worker]
app_codes = ["default"]
poll_interval = "50ms"

[admin]
listen = "127.0.0.1:0"
refresh_interval = "100ms"

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "log"

[[sink]]
name = "log"
plugin = "{plugin}"
config = {{ format = "json" }}
"#,
        cache = dir.join("cache").display(),
        plugin = fixtures::plugin("log").display(),
    );
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), std::iter::empty()).expect("config loads")
}

/// `/healthz` answers, `/readyz` turns 200 once the database answered and the sinks started,
/// `/metrics` shows the rows delivered, the table gauges, publish and latency histograms; when
/// the table disappears `/readyz` says 503 with the reason and the database errors are counted.
async fn admin_serves_metrics_health_and_readiness(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let now = now_ms();
    let records: Vec<_> = (0..20)
        .map(|i| {
            record(
                "default",
                &format!("e{i:02}"),
                &format!("r{}", i % 3),
                now + i,
            )
        })
        .collect();
    store.enqueue(&records).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = Service::bind(service_config(dir.path()), store.clone())
        .await
        .expect("service binds");
    let addr = service.admin_addr().expect("admin listener on");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service.run(RunMode::Forever, shutdown.clone()));

    assert_eq!(request(addr, "GET", "/healthz").await, (200, "ok\n".into()));
    wait_until("readyz 200", DEADLINE, || async {
        match request(addr, "GET", "/readyz").await {
            (200, _) => Ok(()),
            other => Err(other),
        }
    })
    .await;
    wait_until("20 rows delivered", DEADLINE, || async {
        let c = support::status_counts(&store).await;
        if c.delivered == 20 { Ok(()) } else { Err(c) }
    })
    .await;
    // The table's counts come from the status refresh, the row counters from the loops once a
    // mark returns: a refresh may count a row delivered before its loop has booked it.
    let expected = [
        r#"outboxd_table_rows{app_code="default",status="delivered"} 20"#,
        r#"outboxd_rows_total{app_code="default",outcome="claimed"} 20"#,
        r#"outboxd_rows_total{app_code="default",outcome="delivered"} 20"#,
        r#"outboxd_table_rows{app_code="default",status="pending"} 0"#,
        r#"outboxd_oldest_pending_age_seconds{app_code="default"} 0"#,
        r#"outboxd_delivery_latency_seconds_count{app_code="default"} 20"#,
        r#"outboxd_breaker_state{sink="log"} 0"#,
        r#"outboxd_publish_duration_seconds_count{sink="log"}"#,
    ];
    wait_until("every row's metrics", DEADLINE, || async {
        let (status, body) = request(addr, "GET", "/metrics").await;
        assert_eq!(status, 200);
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|line| !body.contains(line))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("missing {missing:?} in\n{body}"))
        }
    })
    .await;
    assert_eq!(request(addr, "GET", "/nope").await.0, 404);
    assert_eq!(request(addr, "POST", "/metrics").await.0, 405);

    db.execute("DROP TABLE room_outbox", &[]).await;
    let reason = wait_until("readyz 503", DEADLINE, || async {
        match request(addr, "GET", "/readyz").await {
            (503, body) => Ok(body),
            other => Err(other),
        }
    })
    .await;
    assert!(
        reason.starts_with("not ready: database unreachable: counts:"),
        "{reason}"
    );
    let (_, metrics) = request(addr, "GET", "/metrics").await;
    assert!(
        metrics.contains(r#"outboxd_database_errors_total{op="counts"}"#),
        "{metrics}"
    );

    shutdown.cancel();
    running.await.unwrap().expect("service stops cleanly");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "admin listener still accepting after shutdown"
    );
}

/// The webhook sink behind a breaker (2 failing batches open it for 200 ms).
fn webhook_sink(receiver: &http::WebhookReceiver) -> SinkConfig {
    let origin = format!("http://{}", receiver.addr());
    SinkConfig {
        name: "webhook".into(),
        plugin: fixtures::plugin("webhook"),
        config: BTreeMap::from([
            ("url".to_string(), receiver.url()),
            ("secret".to_string(), WEBHOOK_SECRET.to_string()),
        ]),
        limits: SinkLimits {
            allow_hosts: vec![origin],
            ..SinkLimits::default()
        },
        breaker: BreakerSettings {
            failures: 2,
            cool_down: Duration::from_millis(200),
        },
    }
}

const WEBHOOK_SECRET: &str = "whsec_ZTJlLXdlYmhvb2stc2lnbmluZy1rZXk=";

/// A receiver answering 503 to 60 requests (10 events × 3 attempts would be spent after 30): with
/// max_attempts 3 and a 20 ms retry interval every event would be `failed` without the breaker.
/// With it, two failing batches open the breaker, the rest of the outage only defers events
/// (failed probes included), and every event is delivered exactly once with at most 2 attempts
/// spent. Another sink (the log plugin) keeps flowing during the outage.
async fn breaker_outlasts_an_outage_longer_than_max_attempts(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let receiver = http::WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    receiver.script(60, http::Reply::status(503));
    let now = now_ms();
    let mut records: Vec<_> = (0..10)
        .map(|i| support::typed_record("default", &format!("w{i}"), "r1", "Hook", now + i))
        .collect();
    records
        .extend((0..10).map(|i| {
            support::typed_record("default", &format!("l{i}"), "r2", "Log", now + 10 + i)
        }));
    store.enqueue(&records).await.unwrap();
    let metrics = Metrics::new();
    let sinks = vec![
        webhook_sink(&receiver),
        fixtures::sink_config("log", "log", &[("format", "json")]),
    ];
    let routes = vec![
        RouteConfig {
            event_type: "Hook".into(),
            sink: "webhook".into(),
        },
        RouteConfig {
            event_type: "*".into(),
            sink: "log".into(),
        },
    ];
    let publishing = Publishing::new(sinks, routes, Path::new("")).expect("valid sinks and routes");
    let publisher = load_publisher_with_metrics(&publishing, &fixtures::settings(), &metrics)
        .await
        .expect("sinks start");
    let options = WorkerOptions {
        app_codes: vec!["default".into()],
        batch_size: 20,
        poll_interval: Duration::from_millis(10),
        idle_probe: Duration::from_millis(10),
        lease: Duration::from_secs(30),
        publish_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            strategy: Strategy::FixedInterval {
                interval: Duration::from_millis(20),
            },
            max_attempts: 3,
        },
        ordering: DeliveryOrder::None,
        concurrency: 1,
        node_id: "breaker-test".into(),
    };
    let worker = Worker::new(store.clone(), publisher, options).with_metrics(metrics.clone());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    wait_until("every event delivered", DEADLINE, || async {
        let c = support::status_counts(&store).await;
        assert_eq!(c.failed, 0, "an event was failed during the outage: {c:?}");
        if c.delivered == 20 { Ok(()) } else { Err(c) }
    })
    .await;
    shutdown.cancel();
    running.await.unwrap().expect("worker stops cleanly");

    assert!(
        receiver.request_count() > 60,
        "the outage was not fully used: {} requests",
        receiver.request_count()
    );
    for i in 0..10 {
        let id = format!("w{i}");
        assert_eq!(receiver.delivered_count(&id), 1, "{id}");
        let row = db.row("default", &id).await.unwrap();
        assert!(
            row.retry_count <= 2,
            "{id} spent {} attempts",
            row.retry_count
        );
    }
    assert!(metrics.rows_counted("default", RowOutcome::deferred) > 0);
    let text = metrics.encode();
    assert!(
        text.contains(r#"outboxd_breaker_state{sink="webhook"} 0"#),
        "breaker not closed again:\n{text}"
    );
    assert!(
        !text.contains(r#"outboxd_breaker_opened_total{sink="webhook"} 0"#)
            && text.contains(r#"outboxd_breaker_opened_total{sink="webhook"}"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"outboxd_breaker_opened_total{sink="log"}"#),
        "the log sink's breaker opened:\n{text}"
    );
}

/// A second host on the machine (a `run --drain` beside the service) finds the default admin
/// address taken: it runs without the listener. An address set explicitly that is taken stops it.
#[tokio::test]
async fn a_taken_default_admin_address_is_skipped_and_an_explicit_one_refused() {
    let taken = match std::net::TcpListener::bind(outboxd::config::DEFAULT_ADMIN_LISTEN) {
        Ok(listener) => Some(listener), // held until the end: the address is taken
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
            None // another host on this machine has it: taken all the same
        }
    };
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let store = db.store_default().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = service_config(dir.path());
    config.admin = Config::defaults().admin;
    assert!(!config.admin.listen_is_explicit);
    let service = Service::bind(config.clone(), store.clone())
        .await
        .expect("a taken default address does not stop the host");
    assert_eq!(service.admin_addr(), None);

    config.admin.listen_is_explicit = true;
    let error = Service::bind(config, store)
        .await
        .err()
        .expect("an explicit address that is taken stops the host");
    assert!(error.to_string().contains("9464"), "{error}");
    drop(taken);
}

support::per_backend!(
    admin_serves_metrics_health_and_readiness,
    breaker_outlasts_an_outage_longer_than_max_attempts,
);
