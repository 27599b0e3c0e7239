//! The indexes the claims read, as data: [`ClaimIndex`] (name, key columns, what `migrate` may
//! replace), the room index and migration 0001's claim indexes. `migrate` checks and creates them
//! (`store/schema/`); each database's dialect names the ones its claims read
//! (`SqlDialect::claim_indexes`). Nothing here depends on the statements or the schema code.

use super::TableName;

/// One index the claims need (migration 0001's `idx_<table>_<suffix>`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimIndex {
    /// The name is `idx_<table>_<suffix>`.
    pub(crate) suffix: &'static str,
    /// Key columns, in order.
    pub(crate) columns: &'static [&'static str],
    /// Whether `migrate` creates it over live rows only where the database's claims use such a
    /// partial index (`SqlDialect::live_rows_predicate`).
    pub(crate) live_rows_only: bool,
    /// Whether the claims' statements name it on databases whose dialect hints the index
    /// (`SqlDialect::room_probe_index_hint`): there it must exist under its own name.
    pub(crate) named_in_claims: bool,
    /// Key columns earlier versions gave the index of this name: `migrate` replaces such an
    /// index (drops it and creates it anew) instead of refusing it.
    pub(crate) former_columns: &'static [&'static [&'static str]],
    /// The rows the index holds, where the database's migrations made it partial on its own
    /// condition (PostgreSQL's retry and lease indexes, migration 0006): `migrate` creates a
    /// missing one with it. `None`: every row, or the dialect's live rows ([`Self::live_rows_only`]).
    pub(crate) predicate: Option<&'static str>,
}

impl ClaimIndex {
    /// The index name for `table` (at most 60 bytes: table names have at most 48).
    pub(crate) fn name(&self, table: &TableName) -> String {
        format!("idx_{}_{}", table.as_str(), self.suffix)
    }

    /// This index over the rows `predicate` admits (a partial index, [`Self::predicate`]).
    pub(crate) const fn over(self, predicate: &'static str) -> ClaimIndex {
        ClaimIndex {
            predicate: Some(predicate),
            ..self
        }
    }

    /// This index on other key columns; `migrate` replaces one with `former` columns.
    pub(crate) const fn keyed(
        self,
        columns: &'static [&'static str],
        former: &'static [&'static [&'static str]],
    ) -> ClaimIndex {
        ClaimIndex {
            columns,
            former_columns: former,
            ..self
        }
    }
}

/// The per-room claims' index: the room heads (each room's first pending entry, one seek per
/// room) and the probes ("is an earlier event of this room still pending, retryable or
/// delivering?", one probe per status). On SQLite it holds live rows only, as migration
/// `sqlite/0002` made it. Earlier builds gave it the columns `(app_code, room_id, status, …)`, which
/// serves the probes but not the heads; `migrate` with the room index rebuilds such an index.
pub(crate) static ROOM_INDEX: ClaimIndex = ClaimIndex {
    suffix: "room",
    columns: &["app_code", "status", "room_id", "created_at_ms", "event_id"],
    live_rows_only: true,
    named_in_claims: true,
    former_columns: &[&["app_code", "room_id", "status", "created_at_ms", "event_id"]],
    predicate: None,
};

/// The claim indexes of migration 0001 that every claim reads, as PostgreSQL and SQLite have
/// them (MySQL/MariaDB's: `store/mysql/dialect.rs`; each backend's: [`claim_indexes`]); `migrate`
/// checks (and creates) them on every run, so an adopted table gets them too. The room index,
/// which only per-room claims read, is not among them ([`ROOM_INDEX`]).
pub(crate) static CLAIM_INDEXES: [ClaimIndex; 3] = [PENDING_INDEX, RETRY_INDEX, LEASE_INDEX];

/// The pending branch's index, the same on every database: it also serves retention, the
/// failed listings and the counts.
pub(crate) const PENDING_INDEX: ClaimIndex = ClaimIndex {
    suffix: "pending",
    columns: &["app_code", "status", "created_at_ms", "event_id"],
    live_rows_only: false,
    named_in_claims: false,
    former_columns: &[],
    predicate: None,
};

/// The retry branch's index as migration 0001 creates it on every database; a dialect may
/// change its key ([`ClaimIndex::keyed`]) or its rows ([`ClaimIndex::over`]).
pub(crate) const RETRY_INDEX: ClaimIndex = ClaimIndex {
    suffix: "retry",
    columns: RETRY_COLUMNS_WITH_STATUS,
    ..PENDING_INDEX
};

/// The expired-lease branch's index as migration 0001 creates it on every database; a dialect
/// may change its key or its rows, as for [`RETRY_INDEX`].
pub(crate) const LEASE_INDEX: ClaimIndex = ClaimIndex {
    suffix: "lease",
    columns: LEASE_COLUMNS_WITH_STATUS,
    ..PENDING_INDEX
};

/// The retry index's columns led by the status (migration 0001's on every database).
pub(crate) const RETRY_COLUMNS_WITH_STATUS: &[&str] = &[
    "app_code",
    "status",
    "next_retry_at_ms",
    "created_at_ms",
    "event_id",
];

/// The lease index's columns led by the status (migration 0001's on every database).
pub(crate) const LEASE_COLUMNS_WITH_STATUS: &[&str] = &[
    "app_code",
    "status",
    "lock_until_ms",
    "created_at_ms",
    "event_id",
];
