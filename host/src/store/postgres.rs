//! The PostgreSQL backend: [`PostgresStore`] and the producer [`save`].
//!
//! Claims lock rows with `FOR UPDATE SKIP LOCKED`, so any number of hosts claim concurrently
//! without waiting on each other, and lease them in the same statement (addressed by `ctid`);
//! marks use `UPDATE … RETURNING`. Migration 0002 adds the trigger that notifies
//! `outboxd_<table>` on every INSERT statement, migration 0003 one that notifies when an UPDATE
//! puts a row back to `pending` (`outboxd requeue`); [`crate::wake::postgres`] listens. The URL is passed to sqlx
//! unchanged, so `?options=-c search_path=…` selects the schema holding the outbox table. Every
//! pooled session runs `SET plan_cache_mode = force_custom_plan` when it opens: each statement is
//! planned for its own execution, never on a generic plan made while the table was empty.

use std::sync::Arc;

use sqlx::Postgres;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::claim_position::ClaimPositions;
use super::exec::{self, Driver, impl_session, impl_store};
use super::schema::Migration;
use super::statement::claim::Statements;
use super::statement::held::HeldRowAddress;
use super::statement::{Bound, SqlBuilder, SqlDialect};
use super::{Backend, ConnectOptions, StoreError, TableName};
use crate::record::Record;

/// The outbox in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    statements: Statements,
    positions: Arc<ClaimPositions>,
}

impl PostgresStore {
    /// Connects to `options.url` (`postgres://user:password@host/db?options=-c%20search_path%3Dschema`).
    pub async fn connect(options: &ConnectOptions) -> Result<PostgresStore, StoreError> {
        super::connect::probe::<sqlx::PgConnection>(&options.url, options.connect_timeout).await?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.connect_timeout)
            // Custom plans only (`SESSION_SETUP` explains why).
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::Executor::execute(&mut *conn, SESSION_SETUP).await?;
                    Ok(())
                })
            })
            .connect(&options.url)
            .await
            .map_err(StoreError::db("connect"))?;
        Ok(PostgresStore {
            pool,
            statements: Statements::new(Backend::Postgres, &options.table),
            positions: Arc::default(),
        })
    }

    /// The connection pool, e.g. to open the transaction [`save`] writes in.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Run on every pooled connection when it opens: **custom plans only.** sqlx prepares each
/// statement once per connection and PostgreSQL, after five executions, may switch a prepared
/// statement to a generic plan that it keeps for the connection's life. Planned while the table
/// was empty or small (a fresh deployment: `migrate`, then the host starts before the first
/// backlog, with no `ANALYZE` yet), that plan reads the table sequentially, and every claim and
/// mark slows down as the table grows: at 2,000 rows/s on a table created with the run, commit →
/// delivered p50 was 11–14 ms against 2.7–3.3 ms (docs/PERFORMANCE.md, "Generic plans on a table
/// that starts empty"). A custom plan is made for each execution from the table's current size
/// and the bound values, for a planning cost of well under a millisecond per statement.
const SESSION_SETUP: &str = "SET plan_cache_mode = force_custom_plan";

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
        include_str!("../../../migrations/postgres/0001_room_outbox.sql"),
    ),
    Migration::new(
        2,
        "0002_commit_notify",
        include_str!("../../../migrations/postgres/0002_commit_notify.sql"),
    ),
    Migration::new(
        3,
        "0003_requeue_notify",
        include_str!("../../../migrations/postgres/0003_requeue_notify.sql"),
    ),
    Migration::new(
        4,
        "0004_room_index_on_demand",
        include_str!("../../../migrations/postgres/0004_room_index_on_demand.sql"),
    )
    .dropping_room_index(),
    Migration::new(
        5,
        "0005_notify_while_hosts_wait",
        include_str!("../../../migrations/postgres/0005_notify_while_hosts_wait.sql"),
    ),
];

impl SqlDialect for PostgresDialect {
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

    /// Key lists go as one `text[]` parameter (`event_id = ANY($n)`): a mark's
    /// `event_id IN ($5 … $504)` under the cached generic plan rebuilt the 500-element array for
    /// every row the UPDATE read; measured 21–24 ms against 14–16 ms per mark of 500 rows
    /// (docs/PERFORMANCE.md, "Leased throughput").
    fn binds_lists_as_arrays(&self) -> bool {
        true
    }

    /// A separate lease `UPDATE … WHERE app_code = $1 AND event_id IN ($2 … $501)` is planned
    /// from statistics: on a table filled after its last ANALYZE (autovacuum lagging behind a
    /// backlog, or off) the planner reads every row of the tenant through the primary key's first
    /// column and filters the ids (4.9 s per claim of 500 on 200k never-analyzed rows). Addressed
    /// by `ctid`, the rows the claim SELECT locked are reached by a TID scan whatever the
    /// statistics say (and in one statement instead of two).
    fn claim_row_address(&self) -> Option<&'static str> {
        Some("ctid")
    }

    /// `idle_in_transaction_session_timeout` for this transaction only (`set_config(…, true)` is
    /// `SET LOCAL`): the server ends the session of a held transaction idle that long.
    fn held_idle_limit(&self, limit_ms: i64) -> Option<Bound> {
        let mut b = SqlBuilder::new(Backend::Postgres);
        b.push("SELECT set_config('idle_in_transaction_session_timeout', ")
            .bind(limit_ms.max(1).to_string())
            .push(", true)");
        Some(b.finish())
    }

    /// The held mark reaches its rows by `ctid` (locked by the same transaction, so the address
    /// cannot change under it): a TID scan whatever the statistics, where `app_code = $1 AND
    /// event_id IN (…)` reads every row of the tenant on a never-analyzed table (see
    /// `claim_row_address`).
    fn held_row_address(&self) -> Option<HeldRowAddress> {
        Some(HeldRowAddress {
            select: "c.ctid::text",
            match_start: "ctid = ANY(",
            match_end: "::tid[])",
        })
    }

    fn clock_ms(&self) -> Option<&'static str> {
        // clock_timestamp(): the time now, not the transaction's start.
        Some("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    /// `CREATE TABLE IF NOT EXISTS` races between concurrent transactions: a transaction-scoped
    /// advisory lock (any constant: "outboxd" in ASCII) serializes `migrate` runs.
    fn migration_lock(&self) -> Option<&'static str> {
        Some("SELECT pg_advisory_xact_lock(31366054425523556)")
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

impl_session!(sqlx::PgConnection, Postgres);

impl Driver for PostgresStore {
    type Db = Postgres;
    const BEGIN_WRITE: Option<&'static str> = None;
    /// A claim commits without waiting for the WAL flush (one simple query, one round trip): on
    /// this project's disk a flush is ~3.5 ms, half of a round's database time. Only a lease is
    /// at stake: a server crash may forget the last claims (their rows are claimed again,
    /// published twice at worst, and a reclaimed lease's attempt may go uncounted), never a
    /// mark, since the WAL is flushed in order and a mark's commit waits for its flush.
    const BEGIN_CLAIM: Option<&'static str> = Some("BEGIN; SET LOCAL synchronous_commit = off");

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn statements(&self) -> &Statements {
        &self.statements
    }

    /// A claimed row leaves a dead entry in the pending index until VACUUM: claims read a
    /// backlog from where the last full claim stopped ([`super::claim_position`]).
    fn positions(&self) -> Option<&ClaimPositions> {
        Some(&self.positions)
    }
}

impl_store!(PostgresStore, Backend::Postgres);

/// Saves `records` as `pending` rows of `table` inside the caller's transaction, so they commit
/// (or roll back) together with the business change. Ids already present are ignored
/// (`ON CONFLICT (app_code, event_id) DO NOTHING`); returns the rows inserted.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::SystemTime;
/// use outboxd::record::Record;
/// use outboxd::store::postgres::save;
/// use outboxd::store::TableName;
///
/// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
/// let mut tx = pool.begin().await?;
/// // … the business change, on the same transaction …
/// let record = Record::build("room-42", "RoomGiftSent", 7, SystemTime::now(), &"rose".to_string())
///     .with_app_code("live");
/// save(&mut tx, &TableName::default(), &[record]).await?;
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub async fn save(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    table: &TableName,
    records: &[Record],
) -> Result<u64, StoreError> {
    exec::save(&mut **tx, Backend::Postgres, table, records).await
}
