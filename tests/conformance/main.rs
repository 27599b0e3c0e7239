//! The `OutboxStore` conformance suite: one set of behaviours, written once, run against SQLite,
//! MariaDB and PostgreSQL.
//!
//! One module per `OutboxStore` operation ([`browse`] for the console's reads, [`enqueue`], [`claim`], [`ordering`] for per-room
//! claims, [`mark`], [`counts`], [`failed`] for `list_failed`/`requeue`, [`purge`], [`migrate`]);
//! [`helpers`] holds the vocabulary they share. Each behaviour is an `async fn(Backend)`, listed at the top of its
//! module in `support::per_backend!`, which makes one `#[tokio::test]` of it per backend, named
//! `<operation>::<backend>::<behaviour>` (`cargo test --test conformance mysql::` runs one
//! backend, `… claim::` one operation). Every test gets its own database (see `support`), so they
//! all run in parallel. Time is explicit (`now_ms` in every call), so leases and retries are
//! tested without sleeping.
//!
//! Test bodies never branch on the backend: a behaviour that differs between databases is a bug
//! in a store, not a case for the suite.

#[path = "../support/mod.rs"]
mod support;

mod helpers;

mod browse;
mod claim;
mod counts;
mod enqueue;
mod failed;
mod held;
mod mark;
mod migrate;
mod ordering;
mod partitions;
mod purge;
