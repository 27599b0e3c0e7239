//! Faults mid-run, with per-room ordering on: a private NATS (JetStream on disk), Redis (AOF,
//! `appendfsync always`) or mosquitto (persistent) killed with SIGKILL and restarted on the same
//! port and data; RabbitMQ's and Kafka's connections cut through a proxy (a private RabbitMQ
//! takes tens of seconds to start; tansu keeps its data in memory only, so a restart would lose
//! what it stored). No event is lost, none fails, each room's events arrive in room order, and
//! an event arrives at most once per attempt (JetStream: exactly once, it drops repeats).

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
    let store = db.store_per_room().await;
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
    match &mut fault {
        Fault::Kill(broker) => {
            broker.kill();
            wait_until("outboxd sees the broker gone", DEADLINE, || async {
                let b = metrics.brokers();
                let seen = b.messages(name, "retryable") + b.errors(name, "disconnect");
                if seen > 0 { Ok(()) } else { Err(seen) }
            })
            .await;
            broker.restart().await;
        }
        Fault::Cut(proxy, _) => {
            for _ in 0..2 {
                let before = proxy.accepted();
                proxy.cut();
                wait_until("outboxd reconnects through the proxy", DEADLINE, || async {
                    let now = proxy.accepted();
                    if now > before { Ok(()) } else { Err(now) }
                })
                .await;
                let delivered = status_counts(&store).await.delivered;
                wait_until("more delivered after the cut", DEADLINE, || async {
                    let c = status_counts(&store).await;
                    if c.delivered > delivered || c.delivered as usize == EVENTS {
                        Ok(())
                    } else {
                        Err(c)
                    }
                })
                .await;
            }
        }
    }
    wait_delivered(&db, EVENTS, DEADLINE).await;
    let received = wait_received(&mut destination, &ids, DEADLINE).await;
    shutdown.cancel();
    running.await.unwrap();
    assert_room_order(&received);
    let counts = counts(&received);
    let rows = db.all_rows(outboxd::store::DEFAULT_TABLE).await;
    for row in &rows {
        let got = counts.get(&row.event_id).copied().unwrap_or(0);
        let attempts = row.retry_count as usize + 1;
        if kind == Kind::Nats {
            assert_eq!(got, 1, "{}: JetStream drops repeats", row.event_id);
        } else {
            // A Kafka producer whose connection is cut after the broker appended a batch but
            // before its ack arrived sends the batch again within the same attempt (no idempotent
            // producer): at most one extra copy per cut.
            let cuts = if kind == Kind::Kafka { 2 } else { 0 };
            assert!(
                (1..=attempts + cuts).contains(&got),
                "{kind:?} {}: received {got} times in {attempts} attempts",
                row.event_id
            );
        }
    }
    let repeats = counts.values().filter(|n| **n > 1).count();
    let retried = rows.iter().filter(|r| r.retry_count > 0).count();
    eprintln!(
        "{kind:?}: {EVENTS} delivered, {} messages, {repeats} ids twice or more, {retried} rows retried",
        received.len()
    );
    destination.cleanup().await;
    drop(fault);
    db.cleanup().await;
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
