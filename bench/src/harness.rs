//! What every `outboxd-bench` mode shares: the benchmark table and the stores on it, a fresh
//! tenant per run, the publisher events go through, and the event rows a run writes.
//!
//! A mode takes a [`Harness`], connects what it needs through it, and returns a report the
//! dispatch (`bench/mod.rs`) prints. Every run writes its own app code (`bench-<mode>-<ms>`), so
//! runs on one table never see each other's rows.

use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context as _;
use async_trait::async_trait;

use crate::args::BenchArgs;
use outboxd::config::{Config, Publishing, RouteConfig, SinkConfig, SinkLimits};
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::record::{Record, now_ms};
use outboxd::store::{self, ConnectOptions, OutboxStore, StoreError, TableName};

/// Bytes of every benchmark event's body.
pub const BODY_BYTES: usize = 64;

/// The benchmark's database, table and configuration, shared by the modes.
#[derive(Debug)]
pub struct Harness<'a> {
    /// The loaded configuration (database, worker, retention, plugins).
    pub config: &'a Config,
    /// The table every mode writes (`--table`, created if missing).
    pub table: TableName,
    /// Its partitions per tenant (`--partitions`), or as it has them.
    pub partitions: Option<u32>,
}

impl<'a> Harness<'a> {
    /// The harness of `outboxd-bench` run with `args` under `config`.
    pub fn new(config: &'a Config, args: &BenchArgs) -> anyhow::Result<Harness<'a>> {
        Ok(Harness {
            config,
            table: TableName::new(&args.table).context("--table")?,
            partitions: args.partitions,
        })
    }

    /// Connect options for `table` with `connections` connections, the rest from the config.
    pub fn connect_options(&self, table: &TableName, connections: u32) -> ConnectOptions {
        ConnectOptions {
            table: table.clone(),
            max_connections: connections,
            ..self.config.connect_options()
        }
    }

    /// A store on the benchmark table with at least `connections` connections (and at least the
    /// config's `database.max_connections`), the table migrated (and given `--partitions`).
    pub async fn store(&self, connections: u32) -> Result<Arc<dyn OutboxStore>, StoreError> {
        let connections = self.config.database.max_connections.max(connections);
        let store = store::connect(&self.connect_options(&self.table, connections)).await?;
        store.migrate().await?;
        if let Some(partitions) = self.partitions {
            store.repartition(partitions).await?;
        }
        Ok(store)
    }

    /// A second pool of exactly `connections` connections on the benchmark table (already
    /// migrated by [`Harness::store`]): producers writing beside the worker, as services do.
    pub async fn pool(&self, connections: u32) -> Result<Arc<dyn OutboxStore>, StoreError> {
        store::connect(&self.connect_options(&self.table, connections)).await
    }

    /// The database URL with its password redacted, for the reports.
    pub fn database(&self) -> String {
        store::redact_url(&self.config.database.url)
    }

    /// A tenant no earlier run used: `bench-<mode>-<unix ms>`.
    pub fn app_code(mode: &str) -> String {
        format!("bench-{mode}-{}", now_ms())
    }

    /// The publisher of a run: the `--plugin` component with every event routed to it (settings
    /// from `--plugin-config`, default limits; the config's `[[broker]]` connections allowed,
    /// only the one a `connection` setting names opened), or a native no-op ([`NoopPublisher`]).
    pub async fn publisher(&self, args: &BenchArgs) -> anyhow::Result<Arc<dyn Publisher>> {
        let Some(plugin) = &args.plugin else {
            return Ok(Arc::new(NoopPublisher));
        };
        let mut settings = std::collections::BTreeMap::new();
        for pair in &args.plugin_config {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("--plugin-config {pair:?}: expected KEY=VALUE"))?;
            settings.insert(key.to_string(), value.to_string());
        }
        let wanted: Vec<_> = self
            .config
            .brokers
            .iter()
            .filter(|b| settings.get("connection").is_none_or(|c| c == b.name()))
            .cloned()
            .collect();
        // The sinks hold the connections: they live as long as the publisher.
        let brokers =
            outboxd::broker::Brokers::open(&wanted, &outboxd::metrics::Metrics::default());
        let sink = SinkConfig {
            name: "bench".into(),
            plugin: plugin.clone(),
            config: settings,
            limits: SinkLimits {
                allow_brokers: brokers.names(),
                ..SinkLimits::default()
            },
            breaker: Default::default(),
        };
        let route = RouteConfig {
            event_type: "*".into(),
            sink: "bench".into(),
        };
        let publishing = Publishing::new(vec![sink], vec![route], std::path::Path::new(""))
            .context("--plugin")?;
        outboxd::plugin::load_publisher_with_brokers(
            &publishing,
            &self.config.plugins,
            &outboxd::metrics::Metrics::default(),
            &brokers,
        )
        .await
        .with_context(|| format!("cannot load the plugin {}", plugin.display()))
    }
}

/// A publisher that accepts everything at once: measures the host, not a sink.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopPublisher;

#[async_trait]
impl Publisher for NoopPublisher {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        vec![Outcome::Delivered; batch.len()]
    }
}

/// How a run's events are named and dated.
#[derive(Debug, Clone, Copy)]
pub enum EventIds<'a> {
    /// Fresh ids as producers make them ([`outboxd::record::new_event_id`]: increasing in
    /// time), created now.
    Fresh,
    /// `{app_code}-{kind}{i}`, created at `created_at_ms + i` (history and its fresh rows, which
    /// must be told apart and dated in the past).
    Numbered {
        /// Told apart by kind, e.g. `h` (history) and `f` (fresh).
        kind: &'a str,
        /// When event 0 was created.
        created_at_ms: i64,
    },
}

/// Events `range` of tenant `app_code`, event `i` in room `room-{i % rooms}` with room version
/// `i + 1`, type `RoomGiftSent` and a [`BODY_BYTES`]-byte body.
pub fn records(app_code: &str, range: Range<u64>, rooms: u32, ids: EventIds<'_>) -> Vec<Record> {
    let now = SystemTime::now();
    range
        .map(|i| {
            let record = Record::build(
                format!("room-{}", i % u64::from(rooms.max(1))),
                "RoomGiftSent",
                i as i64 + 1,
                now,
                &(),
            )
            .with_app_code(app_code);
            let mut record = match ids {
                EventIds::Fresh => record,
                EventIds::Numbered {
                    kind,
                    created_at_ms,
                } => {
                    let mut record = record.with_event_id(format!("{app_code}-{kind}{i}"));
                    record.created_at_ms = created_at_ms + i as i64;
                    record.envelope.occurred_at_ms = record.created_at_ms;
                    record
                }
            };
            record.envelope.body = vec![7u8; BODY_BYTES];
            record
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_events_are_named_dated_and_spread_over_rooms() {
        let rows = records(
            "t",
            10..13,
            2,
            EventIds::Numbered {
                kind: "h",
                created_at_ms: 1_000,
            },
        );
        let ids: Vec<_> = rows.iter().map(|r| r.event_id.as_str()).collect();
        assert_eq!(ids, ["t-h10", "t-h11", "t-h12"]);
        assert_eq!(rows[1].created_at_ms, 1_011);
        assert_eq!(rows[1].envelope.occurred_at_ms, 1_011);
        assert_eq!(rows[0].room_id, "room-0");
        assert_eq!(rows[1].room_id, "room-1");
        assert_eq!(rows[2].envelope.room_version, 13);
        assert!(rows.iter().all(|r| r.envelope.body.len() == BODY_BYTES));
        let fresh = records("t", 0..2, 1000, EventIds::Fresh);
        assert!(fresh[0].event_id < fresh[1].event_id, "fresh ids increase");
        assert!(fresh.iter().all(|r| r.app_code == "t"));
    }
}
