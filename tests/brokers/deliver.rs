//! On the shared brokers: each broker's docs config delivers every event exactly once, with its
//! headers (the producer's trace context among them), in per-room order (Kafka: over connections
//! the host set `TCP_NODELAY` on); a broker that does not answer makes events retryable, never
//! failed, and opens the sink's breaker; the checks that refuse a sink at start.

use std::path::Path;
use std::time::Duration;

use outboxd::config::{Publishing, SinkConfig, SinkLimits};
use outboxd::plugin::{PluginError, load_publisher};

use super::kit::{Destination, Kind, assert_room_order, counts};
use super::support::{Backend, TestDb, private_server::free_port, status_counts, wait_until};
use super::{enqueue, fixtures, load, start, traceparent_of, wait_delivered, wait_received};

/// Events per delivery test: 300, or `OUTBOXD_BROKER_EVENTS` (the 100,000-event runs of
/// docs/PERFORMANCE.md: `OUTBOXD_BROKER_EVENTS=100000 cargo test --test integration brokers::deliver::`).
fn events() -> usize {
    std::env::var("OUTBOXD_BROKER_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// Rooms of a delivery test: 10 per 300 events, at most 1000.
fn rooms(events: usize) -> usize {
    (events / 30).clamp(10, 1000)
}

/// How long a delivery test waits: a minute, plus 2 ms per event.
fn deadline(events: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(2 * events as u64)
}

/// Delivers `EVENTS` events over `ROOMS` rooms through `kind`'s docs config on its shared broker.
async fn delivers_every_event_once_in_room_order(kind: Kind) {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let Some(mut destination) = Destination::shared(kind).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = load(&destination, &db, dir.path(), |_| {});
    let store = db.store_default().await;
    let (count, within) = (events(), deadline(events()));
    let ids = enqueue(&store, count, rooms(count)).await;
    let started = std::time::Instant::now();
    let (shutdown, running, _metrics) = start(config, store.clone()).await;
    wait_delivered(&db, count, within).await;
    let drained = started.elapsed();
    if kind == Kind::Kafka {
        // The Kafka client leaves Nagle's algorithm on; the host turns it off on the
        // connections to the broker's port (host/src/broker/nodelay.rs). rskafka never sets
        // it, so a socket with it on is one the host set.
        let port = url::Url::parse(&Kind::Kafka.shared_url())
            .unwrap()
            .port()
            .unwrap_or(9092);
        let (on, off) = nodelay_of_sockets_to(port);
        assert!(
            on >= 1,
            "no connection to port {port} has TCP_NODELAY ({off} without)"
        );
    }
    let received = wait_received(&mut destination, &ids, within).await;
    shutdown.cancel();
    running.await.unwrap();
    let counts = counts(&received);
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).take(5).collect();
    assert!(
        repeated.is_empty(),
        "{kind:?}: ids received more than once: {repeated:?}"
    );
    assert_eq!(received.len(), count, "{kind:?}");
    for message in &received {
        assert!(message.room.starts_with("room-"), "{kind:?}: {message:?}");
        assert_eq!(
            message.event_type,
            format!("T.{}", message.room),
            "{kind:?}"
        );
        assert!(message.version > 0, "{kind:?}: {message:?}");
        assert_eq!(
            message.traceparent,
            traceparent_of(&message.id).unwrap_or_default(),
            "{kind:?}: the producer's trace context as a header"
        );
    }
    assert_room_order(&received);
    eprintln!(
        "{kind:?}: {count} events over {} rooms delivered in {:.1} s, each id received once, \
         per-room order kept",
        rooms(count),
        drained.as_secs_f64()
    );
    destination.cleanup().await;
    db.cleanup().await;
}

/// Tracing on (`[telemetry] endpoint`): a NATS consumer gets, on every message, the context of
/// its event's delivery span, which the OTLP receiver holds: in the producer's trace, under the
/// producer's span, for the events the producer traced; a root of its own for the others.
#[tokio::test]
async fn with_tracing_on_a_consumer_gets_the_delivery_spans_context() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let Some(mut destination) = Destination::shared(Kind::Nats).await else {
        return;
    };
    let collector = crate::http::OtlpCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = collector.endpoint();
    let config = load(&destination, &db, dir.path(), |table| {
        let mut telemetry = toml::Table::new();
        telemetry.insert("endpoint".into(), toml::Value::String(endpoint));
        table.insert("telemetry".into(), toml::Value::Table(telemetry));
    });
    let store = db.store_default().await;
    let count = 200;
    let ids = enqueue(&store, count, 20).await;
    let (shutdown, running, _metrics) = start(config, store.clone()).await;
    wait_delivered(&db, count, deadline(count)).await;
    let received = wait_received(&mut destination, &ids, deadline(count)).await;
    shutdown.cancel();
    running.await.unwrap(); // the service's shutdown exports what is queued
    let spans = collector.spans();
    for message in &received {
        let span = spans
            .iter()
            .find(|s| s.attribute("messaging.message.id").as_deref() == Some(message.id.as_str()))
            .unwrap_or_else(|| panic!("a delivery span of {}", message.id));
        assert_eq!(
            span.attribute("messaging.destination.name").as_deref(),
            Some("nats")
        );
        assert_eq!(
            message.traceparent,
            format!("00-{}-{}-01", span.trace_id(), span.span_id()),
            "{}: the consumer's parent is the delivery span",
            message.id
        );
        match traceparent_of(&message.id) {
            Some(producer) => {
                let (trace, parent) = (&producer[3..35], &producer[36..52]);
                assert_eq!(
                    (span.trace_id().as_str(), span.parent_id().as_str()),
                    (trace, parent)
                );
            }
            None => assert_eq!(span.parent_id(), "", "{}: untraced, a root", message.id),
        }
    }
    assert_eq!(received.len(), count);
    destination.cleanup().await;
    db.cleanup().await;
}

#[tokio::test]
async fn nats_delivers_every_event_once_in_room_order() {
    delivers_every_event_once_in_room_order(Kind::Nats).await;
}

#[tokio::test]
async fn rabbitmq_delivers_every_event_once_in_room_order() {
    delivers_every_event_once_in_room_order(Kind::Rabbit).await;
}

#[tokio::test]
async fn redis_delivers_every_event_once_in_room_order() {
    delivers_every_event_once_in_room_order(Kind::Redis).await;
}

#[tokio::test]
async fn mqtt_delivers_every_event_once_in_room_order() {
    delivers_every_event_once_in_room_order(Kind::Mqtt).await;
}

#[tokio::test]
async fn kafka_delivers_every_event_once_in_room_order() {
    delivers_every_event_once_in_room_order(Kind::Kafka).await;
}

/// A broker nobody listens for: the events stay retryable (no attempt burnt once the breaker is
/// open, none failed), the breaker opens, the connection counts as down.
#[tokio::test]
async fn a_broker_that_is_down_leaves_events_retryable_and_opens_the_breaker() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redis://127.0.0.1:{}/0", free_port());
    // A destination object only for its config: nothing listens at `url`.
    let Some(shared) = Destination::shared(Kind::Redis).await else {
        return;
    };
    let mut fake = shared;
    fake.url = url;
    let config = load(&fake, &db, dir.path(), |table| {
        let sink = &mut table["sink"].as_array_mut().unwrap()[0];
        let mut breaker = toml::Table::new();
        breaker.insert("failures".into(), 2.into());
        breaker.insert("cool_down".into(), "30s".into());
        sink.as_table_mut()
            .unwrap()
            .insert("breaker".into(), breaker.into());
        let mut retry = toml::Table::new();
        retry.insert("strategy".into(), "fixed_interval".into());
        retry.insert("interval".into(), "100ms".into());
        retry.insert("max_attempts".into(), 10.into());
        table.insert("retry".into(), retry.into());
    });
    let store = db.store_default().await;
    enqueue(&store, 20, 4).await;
    let service = outboxd::service::Service::bind(config, store.clone())
        .await
        .unwrap();
    let metrics = service.metrics().clone();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(service.run(outboxd::worker::RunMode::Forever, shutdown.clone()));
    // The breaker opens when a batch's publish fails; that batch's marks are written after it,
    // and later batches are deferred with the breaker's own reason. So wait for both the open
    // breaker and a retryable row that carries the broker's reason.
    const UNREACHABLE: &str = "broker `redis` (redis) is unreachable";
    const OPEN: &str = "circuit breaker of sink `redis` is open";
    let errors = wait_until(
        "the breaker opens and a row carries the broker's reason",
        Duration::from_secs(30),
        || async {
            let text = metrics.encode();
            let open = text.contains(r#"outboxd_breaker_state{sink="redis"} 1"#);
            let rows = db.all_rows(outboxd::store::DEFAULT_TABLE).await;
            let errors: Vec<String> = rows.iter().filter_map(|r| r.last_error.clone()).collect();
            if open && errors.iter().any(|e| e.contains(UNREACHABLE)) {
                Ok(errors)
            } else {
                Err((open, errors))
            }
        },
    )
    .await;
    for error in &errors {
        assert!(
            error.contains(UNREACHABLE) || error.contains(OPEN),
            "{error}"
        );
    }
    let c = status_counts(&store).await;
    assert_eq!((c.delivered, c.failed), (0, 0), "{c:?}");
    assert!(!metrics.brokers().connected("redis"));
    assert!(metrics.brokers().errors("redis", "connect") > 0);
    shutdown.cancel();
    running.await.unwrap().unwrap();
    fake.cleanup().await;
    db.cleanup().await;
}

/// A sink whose `limits.allow_brokers` names an unknown connection is refused naming the key; a
/// plugin importing `broker` on a sink that may use none is refused naming the sink.
#[tokio::test]
async fn sinks_without_their_broker_are_refused() {
    let error = outboxd::config::Config::from_toml_str(
        "[[sink]]\nname = \"s\"\nplugin = \"b.wasm\"\nlimits = { allow_brokers = [\"evnets\"] }\n\
         [[broker]]\nname = \"events\"\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\n",
        std::iter::empty(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("sink[0].limits.allow_brokers") && error.contains("`evnets`"),
        "{error}"
    );
    let sink = SinkConfig {
        name: "bus".into(),
        plugin: fixtures::plugin("broker"),
        config: [("connection".to_string(), "events".to_string())].into(),
        limits: SinkLimits::default(),
        breaker: Default::default(),
    };
    let publishing = Publishing::new(vec![sink], Vec::new(), Path::new("")).unwrap();
    let error = load_publisher(&publishing, &fixtures::settings())
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(error, PluginError::BrokerNotAllowed { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("limits.allow_brokers"),
        "{error}"
    );
}

/// How many of this process's TCP sockets connected to `port` have `TCP_NODELAY` on, and how
/// many have it off (Linux: every descriptor of /proc/self/fd, looked at through a copy as a
/// `TcpStream`; one that is not a connected TCP socket has no peer address and is passed over).
fn nodelay_of_sockets_to(port: u16) -> (usize, usize) {
    use std::os::fd::FromRawFd;
    let descriptors: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let streams = descriptors.into_iter().filter_map(|fd| {
        // SAFETY: dup takes a descriptor number and returns a new descriptor, or -1 (one closed
        // since the listing). The copy is owned by the stream made of it, which closes it.
        let copy = unsafe { libc::dup(fd) };
        // SAFETY: `copy` is a fresh descriptor of ours; what is not a TCP socket fails below.
        (copy >= 0).then(|| unsafe { std::net::TcpStream::from_raw_fd(copy) })
    });
    let to_port: Vec<bool> = streams
        .filter(|stream| stream.peer_addr().is_ok_and(|peer| peer.port() == port))
        .map(|stream| stream.nodelay().unwrap_or(false))
        .collect();
    let on = to_port.iter().filter(|&&on| on).count();
    (on, to_port.len() - on)
}
