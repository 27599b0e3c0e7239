//! The PostgreSQL backend: [`PostgresStore`] and the producer [`save`].
//!
//! Claims lock rows with `FOR UPDATE SKIP LOCKED`, so any number of hosts claim concurrently
//! without waiting on each other; marks use `UPDATE … RETURNING`. The URL is passed to sqlx
//! unchanged, so `?options=-c search_path=…` selects the schema holding the outbox table.

use sqlx::Postgres;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::sql::exec::{self, Driver, impl_session, impl_store};
use super::sql::{Dialect, Statements};
use super::{Backend, ConnectOptions, StoreError, TableName};
use crate::record::Record;

/// The outbox in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    statements: Statements,
}

impl PostgresStore {
    /// Connects to `options.url` (`postgres://user:password@host/db?options=-c%20search_path%3Dschema`).
    pub async fn connect(options: &ConnectOptions) -> Result<PostgresStore, StoreError> {
        super::reach::probe::<sqlx::PgConnection>(&options.url, options.connect_timeout).await?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.connect_timeout)
            .connect(&options.url)
            .await
            .map_err(StoreError::db("connect"))?;
        Ok(PostgresStore {
            pool,
            statements: Statements::new(Dialect::Postgres, &options.table),
        })
    }

    /// The connection pool, e.g. to open the transaction [`save`] writes in.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl_session!(sqlx::PgConnection, Postgres);

impl Driver for PostgresStore {
    type Db = Postgres;
    const BEGIN_WRITE: Option<&'static str> = None;

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn statements(&self) -> &Statements {
        &self.statements
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
    exec::save(&mut **tx, Dialect::Postgres, table, records).await
}
