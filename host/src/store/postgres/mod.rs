//! The PostgreSQL backend: [`PostgresStore`] and the producer [`save`].
//!
//! A row's partition is `hashtextextended(room_id, 0)`'s low bits, held by an expression index
//! of the live rows (`partitions.rs`). Migrations 0002 and 0003 add the triggers that notify
//! `outboxd_<table>` of new and requeued rows; [`crate::wake::postgres`] listens. The URL is
//! passed to sqlx unchanged, so `?options=-c search_path=…` selects the schema holding the outbox
//! table. Every pooled session runs `SESSION_SETUP`.

use sqlx::Postgres;
use sqlx::postgres::PgPool;

mod dialect;
mod mark;
mod partitions;

use super::exec;
use super::impl_store::impl_store;
use super::session::{BindTextList, impl_session};
use super::statement::rows::Statements;
use super::{Backend, ConnectOptions, StoreError, TableName};

use crate::record::Record;
pub(crate) use dialect::PostgresDialect;

/// The outbox in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    statements: Statements,
}

impl PostgresStore {
    /// Connects to `options.url` (`postgres://user:password@host/db?options=-c%20search_path%3Dschema`).
    pub async fn connect(options: &ConnectOptions) -> Result<PostgresStore, StoreError> {
        super::connect::probe::<sqlx::PgConnection>(&options.url, options.connect_timeout).await?;
        let pool = super::connect::pool_options::<sqlx::Postgres>(options)
            // Cached plans, never a sequential scan (`SESSION_SETUP` explains why).
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::raw_sql(SESSION_SETUP).execute(&mut *conn).await?;
                    Ok(())
                })
            })
            .connect(&options.url)
            .await
            .map_err(StoreError::db("connect"))?;
        Ok(PostgresStore {
            pool,
            statements: Statements::new(Backend::Postgres, &options.table),
        })
    }

    /// The connection pool, e.g. to open the transaction [`save`] writes in.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Run on every pooled connection when it opens: **plans cached, never a sequential scan.**
///
/// sqlx prepares each statement once per connection. After five executions PostgreSQL may
/// switch it to a generic plan, planned once and kept for the connection's life. Planning each
/// execution instead cost more CPU than running it for the small reads and marks of a steady
/// trickle: 0.3 ms a read and 0.3–0.5 ms a mark, over two fifths of the database's CPU at
/// 2,000 rows/s (`perf`).
///
/// A generic plan made while the table was empty or small (a fresh deployment: `migrate`, then
/// the host starts before the first backlog, with no `ANALYZE` yet) used to read the table
/// sequentially, and every read and mark slowed down as the table grew (commit → delivered p50
/// 11–14 ms at 2,000 rows/s; the git history of docs/PERFORMANCE.md, "Generic plans on a table
/// that starts empty"). Every statement of the store is written to be read through an index,
/// so with sequential scans off its generic plan is an index plan whatever the table's size
/// (`tests/cached_plans.rs`). `plan_cache_mode` is set too, so a server or role default of
/// `force_custom_plan` or `force_generic_plan` does not apply.
pub(crate) const SESSION_SETUP: &str = "SET plan_cache_mode = auto; SET enable_seqscan = off";

impl_session!(sqlx::PgConnection, Postgres);

/// Key lists go as one `text[]` parameter (`SqlDialect::binds_lists_as_arrays`).
impl BindTextList for sqlx::Postgres {
    fn bind_text_list(
        query: sqlx::query::Query<'static, Self, <Self as sqlx::Database>::Arguments>,
        values: Vec<String>,
    ) -> sqlx::query::Query<'static, Self, <Self as sqlx::Database>::Arguments> {
        query.bind(values)
    }
}

/// The producer insert as written once: its affected rows are the rows inserted.
impl exec::SaveOps for PostgresStore {
    const BACKEND: Backend = Backend::Postgres;
}

impl_store!(PostgresStore, Postgres);

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
    exec::save::<PostgresStore, _>(&mut **tx, table, records).await
}
