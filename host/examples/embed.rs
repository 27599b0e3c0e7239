//! outboxd as a library inside a Rust service: the service saves events with the store, and a
//! worker in the same process delivers them through a publisher written in Rust (no plugin).
//!
//! ```sh
//! cargo run -p outboxd --example embed            # a temporary SQLite file
//! cargo run -p outboxd --example embed -- postgres://postgres@127.0.0.1:5432/app
//! ```
//!
//! The options come from the same TOML as `outboxd.toml` (here in memory), so every key of
//! docs/CONFIGURATION.md works the same. A service that saves events in its own transaction
//! writes the row as docs/PRODUCING.md says; `enqueue` here is the store's own insert.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use outboxd::config::Config;
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::record::Record;
use outboxd::worker::{RunMode, Worker};
use tokio_util::sync::CancellationToken;

/// A sink written in Rust: prints each event and accepts it.
struct Print;

#[async_trait]
impl Publisher for Print {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        for event in batch {
            println!(
                "{} {} in {}",
                event.event_id, event.event_type, event.room_id
            );
        }
        vec![Outcome::Delivered; batch.len()]
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let url = std::env::args().nth(1).unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("outbox.db").display()
        )
    });
    let config = Config::from_toml_str(
        &format!("[database]\nurl = {url:?}\n[worker]\napp_codes = [\"live\"]\n"),
        [],
    )?;
    let store = outboxd::store::connect(&config.connect_options()).await?;
    store.migrate().await?;

    let records: Vec<Record> = (1..=3)
        .map(|n| {
            Record::build(
                "room-1",
                "RoomGiftSent",
                n,
                SystemTime::now(),
                &format!("gift {n}"),
            )
            .with_app_code("live")
        })
        .collect();
    store.enqueue(&records).await?;

    let worker = Worker::new(store, Arc::new(Print), config.worker_options());
    let stats = worker.run(RunMode::Drain, CancellationToken::new()).await?;
    println!("delivered {} of {}", stats.delivered, records.len());
    Ok(())
}
