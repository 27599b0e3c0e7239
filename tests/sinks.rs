//! End to end on SQLite, MariaDB and PostgreSQL: outbox rows drained by a real `Worker` through
//! the real `load_publisher` into the real webhook and Tencent Cloud IM plugins, talking over
//! wasi:http to loopback servers that check signatures independently (`tests/http`).
//!
//! Proves: routing by event type (`RoomGift*` → im, `*` → webhook); injected failures (webhook
//! 503 + `Retry-After: 1`, IM busy code 10002) retried with backoff until every row is
//! delivered, each event reaching its receiver once when deduplicated by id; permanent errors
//! (webhook 410, IM 10010 group gone) → `failed` with the reason; a URL outside the allowlist →
//! refused and reported, nothing sent; no secret in any `last_error`.

use crate::{fixtures, http, support};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use fixtures::{captured, logs_saying, plugin, settings};
use http::{ExportedSpan, FakeIm, OtlpCollector, Reply, WebhookReceiver};
use outboxd::config::{Publishing, RouteConfig, SinkConfig, SinkLimits, TraceExport};
use outboxd::metrics::Metrics;
use outboxd::plugin::load_publisher;
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::{DeliveryOrder, OutboxStore};
use outboxd::telemetry::Telemetry;
use outboxd::trace_context::TraceContext;
use outboxd::worker::{RunMode, Worker, WorkerOptions};
use support::{Backend, RawRow, TestDb, typed_record, wait_until};
use tokio_util::sync::CancellationToken;

/// The webhook receiver's signing secret.
const WEBHOOK_SECRET: &str = "whsec_ZTJlLXdlYmhvb2stc2lnbmluZy1rZXk=";
/// The IM app.
const SDKAPPID: u64 = 1_400_000_123;
/// The IM app admin.
const IDENTIFIER: &str = "administrator";
/// The IM app's signing key.
const IM_SECRET_KEY: &str = "e2e-im-secret-key-5f1d8c";
/// Prefix of the IM group of a room.
const GROUP_PREFIX: &str = "room_";
/// How long a scenario may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(30);

fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The `webhook` sink POSTing to `url`, allowing `allow`.
fn webhook_sink(url: &str, allow: &str) -> SinkConfig {
    SinkConfig {
        breaker: Default::default(),
        name: "webhook".into(),
        plugin: plugin("webhook"),
        config: config(&[
            ("url", url),
            ("secret", WEBHOOK_SECRET),
            ("timeout_ms", "5000"),
        ]),
        limits: SinkLimits {
            allow_hosts: vec![allow.to_string()],
            max_requests_per_second: 200,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(5),
            ..SinkLimits::default()
        },
    }
}

/// The `im` sink on the fake IM.
fn im_sink(im: &FakeIm) -> SinkConfig {
    let sdkappid = SDKAPPID.to_string();
    SinkConfig {
        breaker: Default::default(),
        name: "im".into(),
        plugin: plugin("im"),
        config: config(&[
            ("endpoint", &im.endpoint()),
            ("sdkappid", &sdkappid),
            ("identifier", IDENTIFIER),
            ("secret_key", IM_SECRET_KEY),
            ("group_prefix", GROUP_PREFIX),
            ("timeout_ms", "5000"),
        ]),
        limits: SinkLimits {
            allow_hosts: vec![im.endpoint()],
            max_requests_per_second: 200,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(5),
            ..SinkLimits::default()
        },
    }
}

/// `RoomGift*` → im, everything else → webhook.
fn routes() -> Vec<RouteConfig> {
    vec![
        RouteConfig {
            event_type: "RoomGift*".into(),
            sink: "im".into(),
        },
        RouteConfig {
            event_type: "*".into(),
            sink: "webhook".into(),
        },
    ]
}

/// Fast retries (fixed 50 ms) and one loop (see the lead's note on MariaDB claims).
fn options(max_attempts: u32) -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["app".into()],
        batch_size: 50,
        poll_interval: Duration::from_millis(20),
        idle_probe: Duration::from_millis(20),
        lease: Duration::from_secs(30),
        publish_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            strategy: Strategy::FixedInterval {
                interval: Duration::from_millis(50),
            },
            max_attempts,
        },
        ordering: DeliveryOrder::None,
        concurrency: 1,
        node_id: "e2e".into(),
    }
}

/// Enqueues `(event_id, room, event_type)` rows.
async fn enqueue(store: &dyn OutboxStore, events: &[(&str, &str, &str)]) {
    let base = now_ms() - 10_000;
    let records: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, (id, room, event_type))| {
            typed_record("app", id, room, event_type, base + i as i64)
        })
        .collect();
    store.enqueue(&records).await.expect("enqueue");
}

/// Runs a worker with the real publisher until every row is `delivered` or `failed`; returns the
/// rows.
async fn run_until_settled(db: &TestDb, sinks: &[SinkConfig], max_attempts: u32) -> Vec<RawRow> {
    run_traced_until_settled(db, sinks, max_attempts, Telemetry::off()).await
}

/// [`run_until_settled`] recording spans through `telemetry`.
async fn run_traced_until_settled(
    db: &TestDb,
    sinks: &[SinkConfig],
    max_attempts: u32,
    telemetry: Telemetry,
) -> Vec<RawRow> {
    let publisher = load_publisher(
        &Publishing::new(sinks.to_vec(), routes(), Path::new("")).expect("valid sinks"),
        &settings(),
    )
    .await
    .unwrap_or_else(|e| panic!("load publisher: {e}"));
    let worker = Worker::new(db.store_default().await, publisher, options(max_attempts))
        .with_telemetry(telemetry);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    let rows = wait_until("every row delivered or failed", DEADLINE, || async {
        let rows = db.all_rows(outboxd::store::DEFAULT_TABLE).await;
        if rows
            .iter()
            .all(|r| r.status == "delivered" || r.status == "failed")
        {
            Ok(rows)
        } else {
            Err(rows
                .into_iter()
                .map(|r| (r.event_id, r.status, r.last_error))
                .collect::<Vec<_>>())
        }
    })
    .await;
    shutdown.cancel();
    run.await.expect("worker task").expect("worker run");
    rows
}

/// No row's `last_error` carries a secret (whole, or the base64 part of the webhook secret).
fn assert_no_secret(rows: &[RawRow]) {
    let webhook_key = WEBHOOK_SECRET.trim_start_matches("whsec_");
    for row in rows {
        let error = row.last_error.as_deref().unwrap_or_default();
        assert!(
            !error.contains(IM_SECRET_KEY) && !error.contains(webhook_key),
            "{}: secret in last_error `{error}`",
            row.event_id
        );
    }
}

fn row<'a>(rows: &'a [RawRow], id: &str) -> &'a RawRow {
    rows.iter()
        .find(|r| r.event_id == id)
        .unwrap_or_else(|| panic!("no row {id}"))
}

/// Gifts go to IM, the rest to the webhook; 3 webhook answers are 503 + `Retry-After: 1` and 2 IM
/// answers are busy (10002): everything ends delivered, each event received once by id.
async fn routed_retried_and_delivered_once(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let receiver = WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    let im = FakeIm::start(SDKAPPID, IDENTIFIER, IM_SECRET_KEY).await;
    receiver.script(3, Reply::status(503).retry_after("1"));
    im.fail_next(2, 10002);

    let gifts = [
        ("g1", "r1", "RoomGiftSent"),
        ("g2", "r1", "RoomGiftSent"),
        ("g3", "r2", "RoomGiftCombo"),
        ("g4", "r3", "RoomGiftSent"),
    ];
    let others = [
        ("w1", "r1", "RoomMemberJoined"),
        ("w2", "r2", "RoomMemberLeft"),
        ("w3", "r2", "RoomClosed"),
        ("w4", "r3", "RoomMemberJoined"),
        ("w5", "r3", "RoomTopicChanged"),
    ];
    let store = db.store_default().await;
    enqueue(&*store, &gifts).await;
    enqueue(&*store, &others).await;

    let sinks = [
        im_sink(&im),
        webhook_sink(&receiver.url(), &format!("http://{}", receiver.addr())),
    ];
    let rows = run_until_settled(&db, &sinks, 10).await;

    for r in &rows {
        assert_eq!(r.status, "delivered", "{}: {:?}", r.event_id, r.last_error);
    }
    assert!(
        rows.iter().filter(|r| r.retry_count > 0).count() >= 3,
        "failures were retried: {:?}",
        rows.iter()
            .map(|r| (&r.event_id, r.retry_count))
            .collect::<Vec<_>>()
    );
    assert_no_secret(&rows);

    // Webhook: only the non-gift events, each delivered exactly once; an id seen more than once
    // was refused (503) every time but the last.
    let expected: BTreeSet<String> = others.iter().map(|(id, ..)| id.to_string()).collect();
    assert_eq!(receiver.delivered_ids(), expected);
    assert!(
        receiver.rejected().is_empty(),
        "bad signatures: {:?}",
        receiver.rejected()
    );
    for id in &expected {
        assert_eq!(receiver.delivered_count(id), 1, "{id}");
        let attempts: Vec<u16> = receiver
            .deliveries()
            .iter()
            .filter(|d| &d.id == id)
            .map(|d| d.status)
            .collect();
        assert!(
            attempts[..attempts.len() - 1].iter().all(|s| *s == 503),
            "{id}: {attempts:?}"
        );
    }
    assert_eq!(
        receiver
            .deliveries()
            .iter()
            .filter(|d| d.status == 503)
            .count(),
        3
    );

    // IM: only the gifts, one stored message each in its room's group.
    let gift_ids: BTreeSet<String> = gifts.iter().map(|(id, ..)| id.to_string()).collect();
    assert_eq!(im.distinct_event_ids(), gift_ids);
    assert!(
        im.rejected().is_empty(),
        "usersig refused: {:?}",
        im.rejected()
    );
    assert_eq!(im.all_messages().len(), gifts.len());
    assert_eq!(im.messages("room_r1").len(), 2);
    assert_eq!(im.messages("room_r2").len(), 1);
    assert_eq!(im.messages("room_r3").len(), 1);
    assert_eq!(
        im.requests().iter().filter(|r| r.answered == 10002).count(),
        2
    );
    db.cleanup().await;
}

/// Webhook 410 and IM 10010 (group gone) are permanent: `failed` at once, reason kept.
async fn permanent_errors_fail_with_the_reason(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let receiver = WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    let im = FakeIm::start(SDKAPPID, IDENTIFIER, IM_SECRET_KEY).await;
    receiver.script(1, Reply::status(410));
    im.fail_next(1, 10010);
    let store = db.store_default().await;
    enqueue(
        &*store,
        &[
            ("gone-gift", "r9", "RoomGiftSent"),
            ("gone-hook", "r9", "RoomClosed"),
        ],
    )
    .await;

    let sinks = [
        im_sink(&im),
        webhook_sink(&receiver.url(), &format!("http://{}", receiver.addr())),
    ];
    let rows = run_until_settled(&db, &sinks, 10).await;

    let gift = row(&rows, "gone-gift");
    assert_eq!(
        (gift.status.as_str(), gift.retry_count),
        ("failed", 1),
        "{gift:?}"
    );
    let reason = gift.last_error.as_deref().unwrap_or_default();
    assert!(reason.contains("10010"), "{reason}");
    let hook = row(&rows, "gone-hook");
    assert_eq!(
        (hook.status.as_str(), hook.retry_count),
        ("failed", 1),
        "{hook:?}"
    );
    let reason = hook.last_error.as_deref().unwrap_or_default();
    assert!(reason.contains("HTTP 410"), "{reason}");
    assert_eq!(
        receiver.request_count(),
        1,
        "a permanent error is not retried"
    );
    assert_eq!(im.requests().len(), 1, "a permanent error is not retried");
    assert_no_secret(&rows);
    db.cleanup().await;
}

/// A webhook URL outside the sink's allowlist: the request is refused in the host and reported
/// as permanent (`failed` after one attempt: only a config change helps, then requeue), and
/// nothing reaches the receiver.
async fn urls_outside_the_allowlist_are_refused(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let receiver = WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    let im = FakeIm::start(SDKAPPID, IDENTIFIER, IM_SECRET_KEY).await;
    let store = db.store_default().await;
    enqueue(
        &*store,
        &[
            ("off-1", "r1", "RoomClosed"),
            ("off-2", "r2", "RoomMemberJoined"),
        ],
    )
    .await;

    // The allowlist names the receiver's host on another port.
    let sinks = [
        im_sink(&im),
        webhook_sink(&receiver.url(), "http://127.0.0.1:1"),
    ];
    let rows = run_until_settled(&db, &sinks, 3).await;

    for r in &rows {
        assert_eq!((r.status.as_str(), r.retry_count), ("failed", 1), "{r:?}");
        let reason = r.last_error.as_deref().unwrap_or_default();
        assert!(
            reason.contains("denied") && reason.contains("limits.allow_hosts"),
            "{}: {reason}",
            r.event_id
        );
    }
    assert_eq!(
        receiver.request_count(),
        0,
        "a refused request reached the receiver"
    );
    assert!(im.requests().is_empty());
    assert_no_secret(&rows);
    db.cleanup().await;
}

/// A producer's trace context travels with its event to the webhook receiver as the
/// `traceparent` and `tracestate` headers, also on a retry, and its trace id is on the event's
/// log lines; an event with none sends none; an event whose row holds an invalid one (a producer
/// that did not check it) is delivered all the same, without headers.
async fn trace_contexts_reach_the_webhook_and_invalid_ones_do_not_stop_delivery(backend: Backend) {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let receiver = WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    let im = FakeIm::start(SDKAPPID, IDENTIFIER, IM_SECRET_KEY).await;
    let store = db.store_default().await;
    let base = now_ms() - 10_000;
    let context = TraceContext::new(PARENT, "rojo=00f067aa0ba902b7").unwrap();
    let traced =
        typed_record("app", "traced", "r1", "RoomClosed", base).with_trace_context(&context);
    let plain = typed_record("app", "plain", "r2", "RoomClosed", base + 1);
    let mut invalid = typed_record("app", "invalid", "r3", "RoomClosed", base + 2);
    invalid.envelope.traceparent = "00-not-a-trace-01".into();
    invalid.envelope.tracestate = "k=v".into();
    store
        .enqueue(&[traced, plain, invalid])
        .await
        .expect("enqueue");
    // The first answers are 503s: each event is retried (and logged as not delivered), the
    // retried event carries its context again.
    captured();
    receiver.script(3, Reply::status(503));

    let origin = format!("http://{}", receiver.addr());
    let sinks = [im_sink(&im), webhook_sink(&receiver.url(), &origin)];
    let rows = run_until_settled(&db, &sinks, 5).await;

    assert!(rows.iter().all(|r| r.status == "delivered"), "{rows:?}");
    for delivery in receiver.deliveries() {
        let expected = match delivery.id.as_str() {
            "traced" => (Some(PARENT), Some("rojo=00f067aa0ba902b7")),
            _ => (None, None),
        };
        assert_eq!(
            (
                delivery.traceparent.as_deref(),
                delivery.tracestate.as_deref()
            ),
            expected,
            "{} (status {})",
            delivery.id,
            delivery.status
        );
    }
    assert_eq!(receiver.delivered_ids().len(), 3);
    assert!(
        receiver.deliveries().len() >= 6,
        "three 503s, then three deliveries"
    );
    let not_delivered = logs_saying("event not delivered");
    for id in ["traced", "plain", "invalid"] {
        let line = not_delivered
            .iter()
            .find(|f| f["event_id"] == id)
            .unwrap_or_else(|| panic!("{id} logged as not delivered: {not_delivered:?}"));
        let expected = match id {
            "traced" => serde_json::json!(context.trace_id()),
            _ => serde_json::Value::Null,
        };
        assert_eq!(line["trace_id"], expected, "{id}");
    }
    db.cleanup().await;
}

/// Tracing on, exporting to `endpoint` (a base URL) as service `outboxd-test`.
fn tracing_to(endpoint: &str, queue_size: usize, timeout: Duration) -> TraceExport {
    TraceExport {
        endpoint: format!("{endpoint}/v1/traces"),
        service_name: "outboxd-test".into(),
        resource: Vec::new(),
        sampling_ratio: 1.0,
        headers: Default::default(),
        timeout,
        queue_size,
    }
}

/// The delivery spans of event `id`, by attempt.
fn sends_of(spans: &[ExportedSpan], id: &str) -> Vec<ExportedSpan> {
    let mut sends: Vec<ExportedSpan> = spans
        .iter()
        .filter(|s| s.attribute("messaging.message.id").as_deref() == Some(id))
        .cloned()
        .collect();
    sends.sort_by_key(|s| s.attribute("outboxd.attempt"));
    sends
}

/// With tracing on, a real OTLP receiver gets: for each event and attempt a delivery span (first
/// attempt a child of the producer's span, the retry a new trace linked to the producer's span
/// and to the first attempt), read and mark spans; the webhook gets the first attempt's span as
/// the parent of every attempt, in the producer's trace. Events with no or an invalid context
/// get root spans and are delivered all the same.
async fn delivery_spans_reach_the_collector_under_the_producers_span(backend: Backend) {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let receiver = WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    let im = FakeIm::start(SDKAPPID, IDENTIFIER, IM_SECRET_KEY).await;
    let collector = OtlpCollector::start().await;
    let store = db.store_default().await;
    let base = now_ms() - 10_000;
    // The producer writes the event inside its span (the Rust library takes the current one).
    let traced = {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        let span = SpanContext::new(
            TraceId::from_hex(TRACE).unwrap(),
            SpanId::from_hex(PRODUCER_SPAN).unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("rojo", "1")]).unwrap(),
        );
        let _inside = opentelemetry::Context::current()
            .with_remote_span_context(span)
            .attach();
        typed_record("app", "traced", "r1", "RoomClosed", base).with_current_trace_context()
    };
    let plain = typed_record("app", "plain", "r2", "RoomClosed", base + 1);
    let mut invalid = typed_record("app", "invalid", "r3", "RoomClosed", base + 2);
    invalid.envelope.traceparent = "00-not-a-trace-01".into();
    store
        .enqueue(&[traced, plain, invalid])
        .await
        .expect("enqueue");
    receiver.script(3, Reply::status(503));

    let metrics = Metrics::default();
    let export = tracing_to(&collector.endpoint(), 4096, Duration::from_secs(5));
    let telemetry = Telemetry::start(Some(&export), "e2e", &metrics).expect("tracing starts");
    let origin = format!("http://{}", receiver.addr());
    let sinks = [im_sink(&im), webhook_sink(&receiver.url(), &origin)];
    let rows = run_traced_until_settled(&db, &sinks, 5, telemetry.clone()).await;
    telemetry.shutdown().await; // exports what is queued
    assert!(rows.iter().all(|r| r.status == "delivered"), "{rows:?}");

    let spans = collector.spans();
    assert!(spans.iter().all(|s| s.service == "outboxd-test"));
    let traced = sends_of(&spans, "traced");
    assert_eq!(traced.len(), 2, "two attempts: {traced:?}");
    let (first, retry) = (&traced[0], &traced[1]);
    assert_eq!(first.span.name, "send webhook");
    assert_eq!(first.span.kind, 4, "PRODUCER");
    assert_eq!(
        (first.trace_id().as_str(), first.parent_id().as_str()),
        (TRACE, PRODUCER_SPAN)
    );
    assert_eq!(
        first.attribute("outboxd.outcome").as_deref(),
        Some("retryable")
    );
    assert_eq!(
        first.attribute("messaging.destination.name").as_deref(),
        Some("webhook")
    );
    assert_eq!(first.attribute("outboxd.room_id").as_deref(), Some("r1"));
    assert_eq!(retry.attribute("outboxd.attempt").as_deref(), Some("2"));
    assert_eq!(
        retry.attribute("outboxd.outcome").as_deref(),
        Some("delivered")
    );
    assert_eq!(retry.parent_id(), "", "a retry is a root");
    assert_ne!(retry.trace_id(), TRACE);
    let links = retry.links();
    assert!(
        links.contains(&(TRACE.to_string(), PRODUCER_SPAN.to_string())),
        "{links:?}"
    );
    assert!(
        links.contains(&(first.trace_id(), first.span_id())),
        "link to the first attempt: {links:?}"
    );

    // Every attempt's webhook request has the first attempt's span as its parent.
    for id in ["traced", "plain", "invalid"] {
        let sends = sends_of(&spans, id);
        assert_eq!(sends.len(), 2, "{id}: {sends:?}");
        if id != "traced" {
            assert_eq!(sends[0].parent_id(), "", "{id}: no producer span, a root");
            assert_eq!(
                sends[0].trace_id(),
                outboxd::telemetry::delivery_trace_id("app", id),
                "{id}: the trace the console names for an untraced event"
            );
        }
        let expected = format!("00-{}-{}-01", sends[0].trace_id(), sends[0].span_id());
        let requests: Vec<_> = receiver
            .deliveries()
            .into_iter()
            .filter(|d| d.id == id)
            .collect();
        assert_eq!(requests.len(), 2, "{id}");
        for request in requests {
            assert_eq!(
                request.traceparent.as_deref(),
                Some(expected.as_str()),
                "{id}"
            );
            let state = (id == "traced").then_some("rojo=1");
            assert_eq!(request.tracestate.as_deref(), state, "{id}");
        }
    }
    for name in ["read room_outbox", "mark room_outbox"] {
        assert!(spans.iter().any(|s| s.span.name == name), "a {name:?} span");
    }
    assert_eq!(metrics.traces().counted("dropped"), 0);
    assert_eq!(metrics.traces().counted("failed"), 0);
    assert_eq!(
        metrics.traces().counted("exported"),
        spans.len() as u64,
        "every span recorded was exported"
    );
    db.cleanup().await;
}

/// A collector that takes connections and never answers (the hostile case: no refusal to
/// notice quickly) holds up no delivery: 2,000 events are delivered while exports time out,
/// spans beyond the queue are dropped and counted, and the outage is logged once.
#[tokio::test]
async fn a_collector_that_never_answers_holds_up_no_delivery() {
    let Some(db) = TestDb::new(Backend::Sqlite).await else {
        return;
    };
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream); // accepted, never read, never answered
        }
    });
    let receiver = WebhookReceiver::start(&[WEBHOOK_SECRET]).await;
    let im = FakeIm::start(SDKAPPID, IDENTIFIER, IM_SECRET_KEY).await;
    let store = db.store_default().await;
    let base = now_ms() - 10_000;
    let records: Vec<_> = (0..2_000)
        .map(|i| {
            typed_record(
                "app",
                &format!("e{i}"),
                &format!("r{}", i % 50),
                "RoomClosed",
                base + i,
            )
        })
        .collect();
    store.enqueue(&records).await.expect("enqueue");
    captured();
    let metrics = Metrics::default();
    // A queue of 16 (below what the config accepts, so that it fills at any machine's speed)
    // and exports that hang 2 s each: spans are dropped long before the first export gives up.
    let export = tracing_to(&endpoint, 16, Duration::from_secs(2));
    let telemetry = Telemetry::start(Some(&export), "e2e", &metrics).expect("tracing starts");
    let origin = format!("http://{}", receiver.addr());
    let sinks = [im_sink(&im), webhook_sink(&receiver.url(), &origin)];
    let rows = run_traced_until_settled(&db, &sinks, 5, telemetry.clone()).await;
    assert_eq!(rows.len(), 2_000);
    assert!(rows.iter().all(|r| r.status == "delivered"));
    let traces = metrics.traces();
    assert!(traces.counted("dropped") > 0, "the queue of 16 filled");
    telemetry.shutdown().await;
    assert_eq!(traces.counted("exported"), 0);
    assert!(traces.counted("failed") > 0, "the exports timed out");
    let outage = logs_saying(
        "trace collector unreachable; spans are dropped until it answers (delivery goes on)",
    );
    assert_eq!(outage.len(), 1, "logged once: {outage:?}");
    held.abort();
    db.cleanup().await;
}

support::per_backend!(
    delivery_spans_reach_the_collector_under_the_producers_span,
    routed_retried_and_delivered_once,
    permanent_errors_fail_with_the_reason,
    urls_outside_the_allowlist_are_refused,
    trace_contexts_reach_the_webhook_and_invalid_ones_do_not_stop_delivery,
);
