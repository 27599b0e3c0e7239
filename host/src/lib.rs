//! outboxd: the transactional-outbox delivery host.
//!
//! Services write events into the `room_outbox` table in the same transaction as their business
//! change; outboxd claims them in leased batches, hands each batch to a publisher (a WebAssembly
//! sink plugin), and marks every row `delivered`, `retryable` or `failed` on its own.
//!
//! # Layout
//! Data flows one way: producer → store → worker → plugin → store.
//! - [`record`]: the row and the producer's [`record::Record`]; [`envelope`]: the protobuf envelope.
//! - [`store`]: the [`store::OutboxStore`] trait and one module per database (SQLite, MySQL/MariaDB,
//!   PostgreSQL), with the producer `save` functions and embedded migrations.
//! - [`retry`]: the retry policy (fixed interval, exponential with full jitter, schedule).
//! - [`publish`]: the [`publish::Publisher`] seam between the worker and the sinks.
//! - [`worker`]: the claim → publish → mark loop, graceful shutdown, drain mode.
//! - [`plugin`]: the wasmtime host running sink plugins built against `wit/`, and routing.
//! - [`config`]: `outboxd.toml` + `OUTBOXD_*` environment, validated once.
//! - [`cli`]: the `outboxd` command line; [`bench`]: `outboxd bench`.

#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod config;
pub mod envelope;
pub mod plugin;
pub mod publish;
pub mod record;
pub mod retry;
pub mod store;
pub mod worker;
