//! outboxd: the transactional-outbox delivery host.
//!
//! Services write events into the `room_outbox` table in the same transaction as their business
//! change; outboxd claims them in leased batches, hands each batch to a publisher (a WebAssembly
//! sink plugin), and marks every row `delivered`, `retryable` or `failed` on its own.
//!
//! # Layout
//! Data flows one way: producer → store → worker → plugin (router → sink) → store. The seams are
//! [`store::OutboxStore`], [`publish::Publisher`] and the WIT world in `wit/`;
//! `docs/ARCHITECTURE.md` has the one-page map. No module or folder imports another that
//! imports it back (`make test-imports`).
//! - [`record`]: the row and the producer's [`record::Record`]; [`envelope`]: the protobuf envelope;
//!   [`trace_context`]: the producer's W3C trace context it may carry; [`glob`]: event type globs
//!   (routes, the console's search).
//! - [`store`]: the [`store::OutboxStore`] contract; the shared executor, statement building, row
//!   decoding, envelope judge and schema; one module per database (SQLite, MySQL/MariaDB,
//!   PostgreSQL) holding its SQL differences and its producer `save`. Its module doc says who
//!   checks and who retries what.
//! - [`retention`]: bounded batched deletes of old `delivered`/`failed` rows; [`dead_letters`]:
//!   `failed` rows requeued or deleted in chunks (`outboxd requeue`, the console).
//! - [`retry`]: the retry policy (fixed interval, exponential with full jitter, schedule).
//! - [`publish`]: the [`publish::Publisher`] seam between the worker and the sinks.
//! - [`worker`]: the claim → publish → mark loop, graceful shutdown, drain mode.
//! - [`wake`]: what wakes idle loops: commit feeds (PostgreSQL `LISTEN`, SQLite
//!   `data_version`), producers in the same process, adaptive probing where neither exists.
//! - [`plugin`]: the wasmtime host running sink plugins built against `wit/`, and routing.
//! - [`broker`]: the `[[broker]]` connections (NATS JetStream, RabbitMQ, Redis Streams, MQTT,
//!   Kafka) plugins publish confirmed messages on through the WIT `broker` import.
//! - [`config`]: `outboxd.toml` + `OUTBOXD_*` environment, validated once (sinks and routes
//!   included); the store's options derived from it (the worker's are derived beside the worker).
//! - [`metrics`]: the Prometheus registry the worker, sinks and refresher report to;
//!   [`monitor`]: the status refresher (table gauges, database readiness) and summary lines;
//!   [`readiness`]: what `/readyz` answers; [`admin`]: the admin HTTP listener (`/metrics`, `/healthz`, `/readyz`, `/reload`);
//!   [`console`]: the operator console it serves at `/` (pages and `/api/…`).
//! - [`reload`]: hot reload of sinks and routes (`SIGHUP`, `POST /reload`).
//! - `outage.rs`: when "went away" and "came back" are logged (database, commit feeds, brokers).
//! - [`telemetry`]: the host's own spans (delivery, read, mark) exported over OTLP.
//! - [`progress`]: `run --drain`'s progress bar (terminal) or progress lines.
//! - [`service`]: `outboxd run` as a service: listener, refresher, retention, sinks, worker, one
//!   shutdown; [`startup`]: loading the config and starting logging, as both binaries do.
//!
//! The `outboxd` command line is not part of this library: it lives in the binary
//! (`host/src/main.rs`, `host/src/cli/`) and uses only this public API. The benchmark is a crate
//! of its own (`bench/`, the `outboxd-bench` binary), on this API and [`store::internals`].

#![warn(missing_docs)]

pub mod admin;
pub mod broker;
pub mod config;
pub mod console;
pub mod dead_letters;
pub mod envelope;
pub mod glob;
pub mod metrics;
pub mod monitor;
mod outage;
pub mod plugin;
pub mod progress;
pub mod publish;
pub mod readiness;
pub mod record;
pub mod reload;
pub mod retention;
pub mod retry;
pub mod service;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod trace_context;
pub mod wake;
pub mod worker;
