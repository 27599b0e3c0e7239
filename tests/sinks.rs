//! End to end on SQLite, MariaDB and PostgreSQL: outbox rows drained by a real `Worker` through
//! the real `load_publisher` into the real webhook and Tencent Cloud IM plugins, talking over
//! wasi:http to loopback servers that check signatures independently (`tests/http`).
//!
//! Proves: routing by event type (`RoomGift*` → im, `*` → webhook); injected failures (webhook
//! 503 + `Retry-After: 1`, IM busy code 10002) retried with backoff until every row is
//! delivered, each event reaching its receiver once when deduplicated by id; permanent errors
//! (webhook 410, IM 10010 group gone) → `failed` with the reason; a URL outside the allowlist →
//! refused and reported, nothing sent; no secret in any `last_error`.

mod fixtures;
mod http;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use fixtures::{captured, logs_saying, plugin, settings};
use http::{FakeIm, Reply, WebhookReceiver};
use outboxd::config::{Publishing, RouteConfig, SinkConfig, SinkLimits};
use outboxd::plugin::load_publisher;
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::{DeliveryOrder, OutboxStore};
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
    let publisher = load_publisher(
        &Publishing::new(sinks.to_vec(), routes(), Path::new("")).expect("valid sinks"),
        &settings(),
    )
    .await
    .unwrap_or_else(|e| panic!("load publisher: {e}"));
    let worker = Worker::new(db.store_default().await, publisher, options(max_attempts));
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

support::per_backend!(
    routed_retried_and_delivered_once,
    permanent_errors_fail_with_the_reason,
    urls_outside_the_allowlist_are_refused,
    trace_contexts_reach_the_webhook_and_invalid_ones_do_not_stop_delivery,
);
