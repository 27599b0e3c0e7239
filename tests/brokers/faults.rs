//! Faults mid-run, with per-room ordering on: a private NATS (JetStream on disk), Redis (AOF,
//! `appendfsync always`) or mosquitto (persistent) killed with SIGKILL and restarted on the same
//! port and data; RabbitMQ's and Kafka's connections cut through a proxy (a private RabbitMQ
//! takes tens of seconds to start; tansu keeps its data in memory only, so a restart would lose
//! what it stored). No event is lost, none fails, each room's events arrive in room order, and
//! an event arrives at most once per attempt (JetStream: exactly once, it drops repeats; Kafka:
//! once more per cut that found it undelivered, see below).
//!
//! Each fault must hit publishing mid-run, or the test proves nothing: fewer than all events are
//! delivered when it strikes, the rest after it; a kill must make publishes fail (retryable
//! results, then rows retried in the database: a bare disconnect is not enough); a cut comes
//! while a request of outboxd's is on its way (the proxy holds what outboxd sends until it holds
//! one, then cuts, dropping it), and on RabbitMQ must make that publish fail and rows be retried
//! too (Kafka's client sends a lost request again by itself, within the same attempt, so no row
//! needs a retry there).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use super::kit::{Destination, Kind, assert_room_order, counts};
use super::servers::PrivateBroker;
use super::support::private_server::free_port;
use super::support::tcp_proxy::TcpProxy;
use super::support::{Backend, TestDb, status_counts, wait_until};
use super::{enqueue, load, start, wait_delivered, wait_received};

const EVENTS: usize = 2000;
const ROOMS: usize = 50;
const DEADLINE: Duration = Duration::from_secs(180);
/// How long the proxy waits for outboxd to send a request it can hold before a cut.
const HOLD_WITHIN: Duration = Duration::from_secs(10);

/// The `[[broker]]` name of `kind`'s docs example.
fn connection(kind: Kind) -> &'static str {
    match kind {
        Kind::Nats => "events",
        Kind::Rabbit => "rabbit",
        Kind::Redis => "redis",
        Kind::Mqtt => "mqtt",
        Kind::Kafka => "kafka",
    }
}

/// What the test breaks: a private broker it kills, or a proxy it cuts (with what is behind it).
enum Fault {
    Kill(PrivateBroker),
    /// The proxy, and the private broker behind it (kept running), if any.
    Cut(TcpProxy, #[allow(dead_code)] Option<PrivateBroker>),
}

async fn loses_no_event(kind: Kind) {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let (fault, url, reader_url) = match kind {
        Kind::Rabbit => {
            let shared: SocketAddr = "127.0.0.1:5672".parse().unwrap();
            let proxy = TcpProxy::start(shared).await;
            let url = format!("amqp://127.0.0.1:{}/%2f", proxy.port());
            (Fault::Cut(proxy, None), url, kind.shared_url())
        }
        Kind::Kafka => {
            let port = free_port();
            let proxy = TcpProxy::start(format!("127.0.0.1:{port}").parse().unwrap()).await;
            let Some(tansu) = PrivateBroker::start_at(kind, port, Some(proxy.port())).await else {
                return;
            };
            let url = tansu.url();
            (Fault::Cut(proxy, Some(tansu)), url.clone(), url)
        }
        _ => {
            let Some(broker) = PrivateBroker::start(kind, None).await else {
                return;
            };
            let url = broker.url();
            (Fault::Kill(broker), url.clone(), url)
        }
    };
    let Some(mut destination) = Destination::create(kind, reader_url).await else {
        return;
    };
    destination.url = url;
    let dir = tempfile::tempdir().unwrap();
    let config = load(&destination, &db, dir.path(), |table| {
        let worker = table
            .entry("worker")
            .or_insert(toml::Table::new().into())
            .as_table_mut()
            .unwrap();
        worker.insert("ordering".into(), "per-room".into());
        let mut retry = toml::Table::new();
        retry.insert("strategy".into(), "fixed_interval".into());
        retry.insert("interval".into(), "200ms".into());
        retry.insert("max_attempts".into(), 1000.into());
        table.insert("retry".into(), retry.into());
        let sink = table["sink"].as_array_mut().unwrap()[0]
            .as_table_mut()
            .unwrap();
        let limits = sink["limits"].as_table_mut().unwrap();
        limits.insert("publish_timeout".into(), "3s".into());
        let mut breaker = toml::Table::new();
        breaker.insert("failures".into(), 3.into());
        breaker.insert("cool_down".into(), "1s".into());
        sink.insert("breaker".into(), breaker.into());
    });
    let store = db.store_default().await;
    let ids = enqueue(&store, EVENTS, ROOMS).await;
    let (shutdown, running, metrics) = start(config, store.clone()).await;
    wait_until("a fifth delivered", DEADLINE, || async {
        let c = status_counts(&store).await;
        if c.delivered as usize >= EVENTS / 5 {
            Ok(())
        } else {
            Err(c)
        }
    })
    .await;
    let name = connection(kind);
    let mut fault = fault;
    // Per fault: the events delivered right after it (fewer than all: it struck mid-run), and
    // the ids delivered before it (a cut cannot make their publish send anything again).
    let mut hits: Vec<(usize, HashSet<String>)> = Vec::new();
    match &mut fault {
        Fault::Kill(broker) => {
            let before = delivered_ids(&db).await;
            let refused = metrics.brokers().messages(name, "retryable");
            broker.kill();
            let at = status_counts(&store).await.delivered as usize;
            assert!(
                at < EVENTS,
                "{kind:?}: the kill came after the run: {at} of {EVENTS} already delivered"
            );
            hits.push((at, before));
            // Publishing must fail while the broker is down: a retryable result (a lost
            // connection alone, `errors(name, "disconnect")`, says nothing of the publishes).
            wait_until(
                "outboxd's publishes refused (retryable)",
                DEADLINE,
                || async {
                    let b = metrics.brokers();
                    let now = b.messages(name, "retryable");
                    if now > refused {
                        Ok(())
                    } else {
                        Err((now, b.errors(name, "disconnect")))
                    }
                },
            )
            .await;
            broker.restart().await;
        }
        Fault::Cut(proxy, _) => {
            for cut in 1..=2 {
                let accepted = proxy.accepted();
                let held = proxy.held();
                let refused = metrics.brokers().messages(name, "retryable");
                // Hold what outboxd sends until a request of its is held (it never reaches the
                // broker; the broker's answers still flow, so outboxd goes on to send one), then
                // cut: the fault hits a publish in flight, never an idle connection.
                proxy.hold(true);
                let holding = wait_until(
                    "a request of outboxd's held by the proxy (or every event delivered)",
                    HOLD_WITHIN,
                    || async {
                        if proxy.held() > held {
                            return Ok(true);
                        }
                        let c = status_counts(&store).await;
                        if c.delivered as usize == EVENTS {
                            Ok(false)
                        } else {
                            Err(c)
                        }
                    },
                )
                .await;
                let before = delivered_ids(&db).await;
                proxy.cut();
                proxy.hold(false);
                let at = status_counts(&store).await.delivered as usize;
                assert!(
                    holding && at < EVENTS,
                    "{kind:?}: cut {cut} hit no publish mid-run: a request held {holding}, \
                     {at} of {EVENTS} delivered"
                );
                hits.push((at, before));
                if kind != Kind::Kafka {
                    // The request cut was a publish: its messages come back refused (Kafka's
                    // client sends it again by itself instead, see below).
                    wait_until("the publish cut refused (retryable)", DEADLINE, || async {
                        let now = metrics.brokers().messages(name, "retryable");
                        if now > refused { Ok(()) } else { Err(now) }
                    })
                    .await;
                }
                wait_until("outboxd reconnects through the proxy", DEADLINE, || async {
                    let now = proxy.accepted();
                    if now > accepted { Ok(()) } else { Err(now) }
                })
                .await;
                // Publishing goes on over the new connection before the next cut (a delivered
                // count could rise on marks of publishes confirmed before this cut).
                let confirmed = metrics.brokers().messages(name, "confirmed");
                wait_until(
                    "a publish confirmed after the reconnection",
                    DEADLINE,
                    || async {
                        let now = metrics.brokers().messages(name, "confirmed");
                        if now > confirmed { Ok(()) } else { Err(now) }
                    },
                )
                .await;
            }
        }
    }
    // Every event delivered in the end: those the faults found undelivered were delivered after.
    wait_delivered(&db, EVENTS, DEADLINE).await;
    let rows = db.all_rows(outboxd::store::DEFAULT_TABLE).await;
    let retried = rows.iter().filter(|r| r.retry_count > 0).count();
    let refused = metrics.brokers().messages(name, "retryable");
    // A fault that hit publishing leaves rows retried: the refused publishes were retried, not
    // taken for delivered. Kafka is the exception: its client (rskafka) resends a request lost
    // in a cut by itself, within the same publish, so no attempt needs to fail.
    if kind != Kind::Kafka {
        assert!(
            refused > 0 && retried > 0,
            "{kind:?}: the faults hit publishing yet {refused} publishes were refused \
             (retryable) and {retried} rows retried"
        );
    }
    let received = wait_received(&mut destination, &ids, DEADLINE).await;
    shutdown.cancel();
    running.await.unwrap();
    assert_room_order(&received);
    let counts = counts(&received);
    for row in &rows {
        let got = counts.get(&row.event_id).copied().unwrap_or(0);
        let attempts = row.retry_count as usize + 1;
        if kind == Kind::Nats {
            assert_eq!(got, 1, "{}: JetStream drops repeats", row.event_id);
        } else {
            // A Kafka producer whose connection is cut after the broker appended a batch but
            // before its ack arrived sends the batch again within the same attempt (rskafka
            // retries a request whose connection broke; no idempotent producer): one extra copy
            // per cut that found the event not yet delivered. An event delivered before a cut
            // had its publish over before it, so that cut cannot repeat it: events delivered
            // before the first cut get none.
            let extra = if kind == Kind::Kafka {
                hits.iter()
                    .filter(|(_, before)| !before.contains(&row.event_id))
                    .count()
            } else {
                0
            };
            assert!(
                (1..=attempts + extra).contains(&got),
                "{kind:?} {}: received {got} times in {attempts} attempts ({extra} cuts found \
                 it undelivered)",
                row.event_id
            );
        }
    }
    let repeats = counts.values().filter(|n| **n > 1).count();
    let at: Vec<usize> = hits.iter().map(|(at, _)| *at).collect();
    eprintln!(
        "{kind:?}: {EVENTS} delivered ({at:?} at the faults), {} messages, {repeats} ids twice \
         or more, {refused} publishes refused, {retried} rows retried",
        received.len()
    );
    destination.cleanup().await;
    drop(fault);
    db.cleanup().await;
}

/// The ids of the rows delivered so far.
async fn delivered_ids(db: &TestDb) -> HashSet<String> {
    db.all_rows(outboxd::store::DEFAULT_TABLE)
        .await
        .into_iter()
        .filter(|row| row.status == "delivered")
        .map(|row| row.event_id)
        .collect()
}

#[tokio::test]
async fn nats_killed_and_restarted_loses_no_event() {
    loses_no_event(Kind::Nats).await;
}

#[tokio::test]
async fn redis_killed_and_restarted_loses_no_event() {
    loses_no_event(Kind::Redis).await;
}

#[tokio::test]
async fn mqtt_killed_and_restarted_loses_no_event() {
    loses_no_event(Kind::Mqtt).await;
}

#[tokio::test]
async fn rabbitmq_connections_cut_lose_no_event() {
    loses_no_event(Kind::Rabbit).await;
}

#[tokio::test]
async fn kafka_connections_cut_lose_no_event() {
    loses_no_event(Kind::Kafka).await;
}
