//! MySQL's / MariaDB's SQL: what its statements differ in, and its embedded migrations.

use crate::store::claim_index::{
    ClaimIndex, LEASE_COLUMNS_WITH_STATUS, LEASE_INDEX, PENDING_INDEX, RETRY_COLUMNS_WITH_STATUS,
    RETRY_INDEX,
};
use crate::store::claim_position::ClaimPosition;
use crate::store::migration::Migration;
use crate::store::room_cursor::RoomWalk;
use crate::store::statement::claim::PositionSide;
use crate::store::statement::mark::mark_rows_counted;
use crate::store::statement::{Arg, Bound, SqlBuilder, SqlDialect};
use crate::store::{Backend, CommitFeed, EventCursor, Lease, Mark, TableName};

/// MySQL's / MariaDB's SQL: `?` placeholders, `FOR UPDATE SKIP LOCKED`, no `UPDATE … RETURNING`
/// (a mark that did not match every row lists the rows it changed), `ON DUPLICATE KEY UPDATE` upserts whose
/// affected-row count includes duplicates, statements by primary key forced onto it, InnoDB
/// tables in `utf8mb4_bin`; no migration lock (DDL commits implicitly, every step of `migrate`
/// is idempotent instead).
#[derive(Debug)]
pub(crate) struct MySqlDialect;

/// The embedded migrations (`migrations/mysql/`).
const MIGRATIONS: &[Migration] = &[
    Migration::new(
        1,
        "0001_room_outbox",
        include_str!("../../../../migrations/mysql/0001_room_outbox.sql"),
    ),
    Migration::new(
        2,
        "0002_room_index_on_demand",
        include_str!("../../../../migrations/mysql/0002_room_index_on_demand.sql"),
    )
    .dropping_room_index(),
    Migration::new(
        3,
        "0003_retry_lease_without_status",
        include_str!("../../../../migrations/mysql/0003_retry_lease_without_status.sql"),
    ),
    Migration::new(
        4,
        "0004_partitions",
        include_str!("../../../../migrations/mysql/0004_partitions.sql"),
    ),
];

/// The claim indexes MySQL's / MariaDB's claims read: the retry and lease indexes without the
/// status (migration 0003), so that InnoDB, which rewrites a secondary index entry only when one
/// of its columns changes, leaves them alone on every status change but into and out of their
/// own state. `migrate` rebuilds the status-led ones of migration 0001 (`former_columns`).
static CLAIM_INDEXES: [ClaimIndex; 3] = [
    PENDING_INDEX,
    RETRY_INDEX.keyed(
        &["app_code", "next_retry_at_ms", "created_at_ms", "event_id"],
        &[RETRY_COLUMNS_WITH_STATUS],
    ),
    LEASE_INDEX.keyed(
        &["app_code", "lock_until_ms", "created_at_ms", "event_id"],
        &[LEASE_COLUMNS_WITH_STATUS],
    ),
];

impl SqlDialect for MySqlDialect {
    fn backend(&self) -> Backend {
        Backend::MySql
    }

    /// The binary log, where the server writes one and the user may read it (`crate::wake::binlog`).
    fn commit_feed(&self) -> CommitFeed {
        CommitFeed::Binlog
    }

    /// `FORCE INDEX (PRIMARY)`: MySQL/MariaDB otherwise may walk a secondary index on the
    /// `app_code` prefix (small tables) or on the lease (`status`, `lock_until_ms`) and lock the
    /// entries of other workers' rows on the way: two claims' lease UPDATEs then deadlock (seen in
    /// tests/conformance/claim.rs). By primary key a statement locks only its own rows.
    fn primary_key_access(&self) -> &'static str {
        " FORCE INDEX (PRIMARY)"
    }

    /// `FORCE INDEX (idx_<table>_room)`: InnoDB does not refresh a table's statistics after an
    /// `ALTER TABLE` on it while empty (the migration dropping the room index, or its `CREATE
    /// INDEX`), and with those statistics MariaDB plans the probe on the primary key's `app_code`
    /// prefix (the tenant's whole backlog per candidate) once a backlog arrives
    /// (tests/stale_plans.rs).
    fn room_probe_index_hint(&self, name: &str) -> Option<String> {
        Some(format!(" FORCE INDEX ({name})"))
    }

    /// The retry and lease indexes without the status ([`CLAIM_INDEXES`]).
    fn claim_indexes(&self) -> &'static [ClaimIndex; 3] {
        &CLAIM_INDEXES
    }

    /// ` AND c.next_retry_at_ms > 0 AND c.next_retry_at_ms <= ?`: the retry index holds every row
    /// (at 0 outside 'retryable'), so the range starts above 0 (tests/explain.rs fails without
    /// it: the branch reads the tenant's whole history).
    fn write_due_retry_bound(&self, b: &mut SqlBuilder) {
        b.push(" AND c.next_retry_at_ms > 0 AND c.next_retry_at_ms <= ")
            .placeholder();
    }

    /// The room heads by a loose index scan: MariaDB runs the default walk's correlated
    /// `room_id > w.room_id` as a scan of the tenant's pending entries (`claim.rs`).
    fn write_room_heads(
        &self,
        b: &mut SqlBuilder,
        table: &TableName,
        columns: &str,
        walk: Option<PositionSide>,
    ) {
        super::claim::write_room_heads(b, table, columns, walk);
    }

    fn room_heads_args(&self, app_code: &str, walk: &RoomWalk) -> Vec<Arg> {
        super::claim::room_heads_args(app_code, walk)
    }

    /// The row comparison is a range on `created_at_ms` alone in MariaDB (EXPLAIN's `key_len`):
    /// two ranges on the full key instead (`claim.rs`).
    fn write_position_bound(&self, b: &mut SqlBuilder, side: PositionSide) {
        super::claim::write_position_bound(b, side);
    }

    fn position_args(&self, position: &ClaimPosition) -> Vec<Arg> {
        super::claim::position_args(position)
    }

    /// Two ranges on the full key, like the claim position (`browse.rs`).
    fn write_before_bound(&self, b: &mut SqlBuilder, before: &EventCursor) {
        super::browse::write_before_bound(b, before);
    }

    fn ignore_duplicate_key(&self) -> &'static str {
        " ON DUPLICATE KEY UPDATE event_id = event_id"
    }

    /// No `UPDATE … RETURNING`: the UPDATE without an id list, then (when it did not match every
    /// mark) the rows it changed listed (`mark.rs`).
    fn mark_statements(
        &self,
        table: &TableName,
        lease: &Lease,
        marks: &[Mark],
        now_ms: i64,
    ) -> Vec<(&'static str, Bound)> {
        vec![
            (
                "mark",
                mark_rows_counted(Backend::MySql, table, lease, marks, now_ms),
            ),
            (
                "marked",
                super::mark::marked_rows(table, lease, marks, now_ms),
            ),
        ]
    }

    fn clock_ms(&self) -> Option<&'static str> {
        // UNIX_TIMESTAMP of a session-time DATETIME is UTC whatever the session's time zone.
        Some("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    fn bookkeeping_table_options(&self) -> &'static str {
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    }

    fn ignore_duplicate_version(&self) -> &'static str {
        " ON DUPLICATE KEY UPDATE version = version"
    }

    fn table_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::MySql);
        b.push(
            "SELECT column_name FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ",
        )
        .bind(table.as_str());
        b.finish()
    }

    fn table_index_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::MySql);
        b.push(
            "SELECT index_name, column_name FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = ",
        )
        .bind(table.as_str())
        .push(" ORDER BY index_name, seq_in_index");
        b.finish()
    }

    fn drop_index_hint(&self, table: &TableName, name: &str) -> String {
        format!("DROP INDEX {name} ON {}", table.as_str())
    }
}
