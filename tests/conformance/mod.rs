//! The `OutboxStore` conformance suite: one set of behaviours, written once, run against SQLite,
//! MariaDB and PostgreSQL.
//!
//! One module per `OutboxStore` operation: [`partitions`] (`rebalance`: partition ownership, and
//! the fence of what an owner reads), [`read`] (`read_partitions`: which rows a partition read
//! hands out, in which order, and which it rejects), [`ordering`] (`read_partitions` with per-room
//! order), [`repartition`] (a change of partition count), [`mark`], [`enqueue`] (and the
//! producer's `save`), [`counts`], [`failed`] (`list_failed`, `requeue`), [`purge`], [`browse`] (the console's reads and dead-letter
//! deletes) and [`migrate`]. [`helpers`] holds the vocabulary they share. Each behaviour is an
//! `async fn(Backend)`,
//! listed at the top of its module in `support::per_backend!`, which makes one `#[tokio::test]`
//! of it per backend, named `conformance::<operation>::<backend>::<behaviour>` (`cargo nextest run
//! -E 'test(/^conformance::.*::mysql::/)'` runs one backend, `-E 'test(/^conformance::read::/)'`
//! one operation). Every test gets its own database (see
//! `support`), so they all run in parallel. Time is explicit (`now_ms` in every read and mark),
//! so due retries and the expired leases of old-version hosts are tested without sleeping; only
//! partition leases, which count on the database's clock, are waited out.
//!
//! Test bodies never branch on the backend: a behaviour that differs between databases is a bug
//! in a store, not a case for the suite.

mod helpers;

mod browse;
mod counts;
mod enqueue;
mod failed;
mod mark;
mod migrate;
mod ordering;
mod partitions;
mod purge;
mod read;
mod repartition;
