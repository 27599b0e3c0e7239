//! PostgreSQL's SQL: what its statements differ in, and its embedded migrations.

use std::sync::Arc;

use crate::store::claim_index::{ClaimIndex, LEASE_INDEX, PENDING_INDEX, RETRY_INDEX};
use crate::store::migration::Migration;
use crate::store::statement::claim::{ClaimBranch, PositionSide};
use crate::store::statement::held::HeldRowAddress;
use crate::store::statement::{Bound, SqlBuilder, SqlDialect};
use crate::store::{Backend, CommitFeed, DeliveryOrder, Lease, RejectedRow, TableName};

/// PostgreSQL's SQL: `$n` placeholders, `FOR UPDATE SKIP LOCKED`, `UPDATE … RETURNING`,
/// `ON CONFLICT … DO NOTHING`; per-room probes fenced with `OFFSET 0`; `migrate` serialized with an
/// advisory lock; unquoted names folded to lower case in the catalog.
#[derive(Debug)]
pub(crate) struct PostgresDialect;

/// The embedded migrations (`migrations/postgres/`).
const MIGRATIONS: &[Migration] = &[
    Migration::new(
        1,
        "0001_room_outbox",
        include_str!("../../../../migrations/postgres/0001_room_outbox.sql"),
    ),
    Migration::new(
        2,
        "0002_commit_notify",
        include_str!("../../../../migrations/postgres/0002_commit_notify.sql"),
    ),
    Migration::new(
        3,
        "0003_requeue_notify",
        include_str!("../../../../migrations/postgres/0003_requeue_notify.sql"),
    ),
    Migration::new(
        4,
        "0004_room_index_on_demand",
        include_str!("../../../../migrations/postgres/0004_room_index_on_demand.sql"),
    )
    .dropping_room_index(),
    Migration::new(
        5,
        "0005_notify_while_hosts_wait",
        include_str!("../../../../migrations/postgres/0005_notify_while_hosts_wait.sql"),
    ),
    Migration::new(
        6,
        "0006_live_retry_lease_indexes",
        include_str!("../../../../migrations/postgres/0006_live_retry_lease_indexes.sql"),
    )
    .outside_transaction(),
    Migration::new(
        7,
        "0007_partitions",
        include_str!("../../../../migrations/postgres/0007_partitions.sql"),
    )
    .outside_transaction(),
];

/// The claim indexes PostgreSQL's claims read: the retry and lease indexes over live rows only
/// (migration 0006), each on its state and its claim branch's column, which the branch's
/// comparison proves and the per-room probes do not (so those are never planned on them).
static CLAIM_INDEXES: [ClaimIndex; 3] = [
    PENDING_INDEX,
    RETRY_INDEX.over("status = 'retryable' AND next_retry_at_ms IS NOT NULL"),
    LEASE_INDEX.over("status = 'delivering' AND lock_until_ms IS NOT NULL"),
];

impl SqlDialect for PostgresDialect {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    /// `LISTEN` on the channel of migration 0002's and 0003's triggers (`crate::wake::postgres`).
    fn commit_feed(&self) -> CommitFeed {
        CommitFeed::Listen
    }

    fn placeholder(&self, sql: &mut String, n: usize) {
        sql.push('$');
        sql.push_str(&n.to_string());
    }

    /// `OFFSET 0` keeps the `NOT EXISTS` a correlated subplan (the planner never pulls a sublink
    /// with an OFFSET up into an anti-join), so each candidate probes the room index with its own
    /// (app_code, room_id) instead of the planner joining against every active row of the tenant
    /// when its statistics are stale (a freshly filled table): measured 9.4 s → milliseconds per
    /// claim of 500 with 20k fresh rows.
    fn probe_end(&self) -> &'static str {
        " OFFSET 0)"
    }

    /// The room walk, each head read and locked in a `LATERAL` subquery per room
    /// (`claim.rs`): on a table without statistics PostgreSQL hash-joined the walk with every
    /// pending row of the tenant (232 ms against 2.7 ms per claim of 25 rooms × 2,000 events).
    fn write_room_heads(
        &self,
        b: &mut SqlBuilder,
        table: &TableName,
        columns: &str,
        walk: Option<PositionSide>,
    ) {
        super::claim::write_room_heads(b, table, columns, walk);
    }

    /// Key lists go as one `text[]` parameter (`event_id = ANY($n)`): a mark's
    /// `event_id IN ($5 … $504)` under the cached generic plan rebuilt the 500-element array for
    /// every row the UPDATE read; measured 21–24 ms against 14–16 ms per mark of 500 rows
    /// (the git history of docs/PERFORMANCE.md, "Leased throughput").
    fn binds_lists_as_arrays(&self) -> bool {
        true
    }

    /// A separate lease `UPDATE … WHERE app_code = $1 AND event_id IN ($2 … $501)` is planned
    /// from statistics: on a table filled after its last ANALYZE (autovacuum lagging behind a
    /// backlog, or off) the planner reads every row of the tenant through the primary key's first
    /// column and filters the ids (4.9 s per claim of 500 on 200k never-analyzed rows). Addressed
    /// by `ctid`, the rows the claim SELECT locked are reached by a TID scan whatever the
    /// statistics say (and in one statement instead of two).
    fn claim_lease_text(
        &self,
        table: &TableName,
        branch: ClaimBranch,
        ordering: DeliveryOrder,
        position: Option<PositionSide>,
    ) -> Option<Arc<str>> {
        let address = "ctid";
        let text = super::claim::claim_lease_text(table, branch, ordering, address, position);
        Some(text)
    }

    /// The rows are leased by the claim statement: only the rejected ones are failed, under the
    /// new lease.
    fn claim_follow_ups(
        &self,
        table: &TableName,
        lease: &Lease,
        now_ms: i64,
        _event_ids: &[&str],
        rejected: &[RejectedRow],
    ) -> Vec<(&'static str, Bound)> {
        let reject = super::claim::reject_leased_rows(table, lease, now_ms, rejected);
        vec![("reject", reject)]
    }

    /// The held mark reaches its rows by `ctid` (locked by the same transaction, so the address
    /// cannot change under it): a TID scan whatever the statistics, where `app_code = $1 AND
    /// event_id IN (…)` reads every row of the tenant on a never-analyzed table (see
    /// `claim_lease_text`).
    fn held_row_address(&self) -> Option<HeldRowAddress> {
        Some(super::held::HELD_ROW_ADDRESS)
    }

    fn clock_ms(&self) -> Option<&'static str> {
        // clock_timestamp(): the time now, not the transaction's start.
        Some("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    }

    /// The retry and lease indexes over live rows ([`CLAIM_INDEXES`]).
    fn claim_indexes(&self) -> &'static [ClaimIndex; 3] {
        &CLAIM_INDEXES
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    /// `CREATE TABLE IF NOT EXISTS` races between concurrent transactions: a transaction-scoped
    /// advisory lock (any constant: "outboxd" in ASCII) serializes `migrate` runs.
    fn migration_lock(&self) -> Option<&'static str> {
        Some(
            "SELECT CASE WHEN pg_try_advisory_xact_lock(31366054425523556) \
             THEN 1::bigint ELSE 0::bigint END",
        )
    }

    /// The same key as [`Self::migration_lock`], held by the session: a `migrate` building an
    /// index concurrently and one in its transaction wait for each other.
    fn migration_session_lock(&self) -> Option<[&'static str; 2]> {
        Some([
            "SELECT CASE WHEN pg_try_advisory_lock(31366054425523556) \
             THEN 1::bigint ELSE 0::bigint END",
            "SELECT pg_advisory_unlock(31366054425523556)",
        ])
    }

    fn table_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::Postgres);
        b.push(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = ",
        )
        .bind(catalog_name(table));
        b.finish()
    }

    fn table_index_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::Postgres);
        b.push(
            "SELECT i.relname::text, a.attname::text FROM pg_index x \
             JOIN pg_class t ON t.oid = x.indrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             JOIN pg_class i ON i.oid = x.indexrelid \
             CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
             WHERE n.nspname = current_schema() AND t.relname::text = ",
        )
        .bind(catalog_name(table))
        .push(" AND k.ord <= x.indnkeyatts ORDER BY i.relname, k.ord");
        b.finish()
    }
}

/// The table name as the catalog stores it: PostgreSQL folds unquoted identifiers to lower case.
fn catalog_name(table: &TableName) -> String {
    table.as_str().to_ascii_lowercase()
}
