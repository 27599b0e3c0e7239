//! Before a shape's drain is timed, the database writes out what the loads and drains before it
//! left dirty ([`settle`]), so that no shape pays for another's pages: with the shapes run one
//! after the other, the second found the first's dirty buffers and a checkpoint the first's WAL
//! had made due, and spent up to twice the CPU per event on them (PostgreSQL, 200k events).

use std::time::Duration;

use sqlx::Connection;

use outboxd::store::{Backend, StoreError};

/// Writes out the database's dirty pages: PostgreSQL `CHECKPOINT` (a superuser's or
/// `pg_checkpoint`'s right: without it, a warning is returned and nothing else happens), SQLite
/// `PRAGMA wal_checkpoint(TRUNCATE)`. MariaDB/MySQL has no statement that flushes InnoDB's dirty
/// pages without changing a global setting of the server: nothing there.
pub async fn settle(url: &str, connect_timeout: Duration) -> Result<Option<String>, StoreError> {
    let done = match Backend::from_url(url)? {
        Backend::MySql => return Ok(None),
        Backend::Postgres => {
            let mut conn = connect(sqlx::PgConnection::connect(url), connect_timeout).await?;
            let done = sqlx::raw_sql("CHECKPOINT")
                .execute(&mut conn)
                .await
                .map(drop);
            let _ = conn.close().await;
            done
        }
        Backend::Sqlite => {
            let options = outboxd::store::internals::sqlite_connect_options(url)?;
            let connecting = sqlx::SqliteConnection::connect_with(&options);
            let mut conn = connect(connecting, connect_timeout).await?;
            let done = sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&mut conn)
                .await
                .map(drop);
            let _ = conn.close().await;
            done
        }
    };
    match done {
        Ok(()) => Ok(None),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42501") => Ok(Some(format!(
            "no CHECKPOINT before the drain ({}): each shape may pay for the dirty pages of the \
             one before it; run the bench as a superuser or grant pg_checkpoint",
            e.message()
        ))),
        Err(e) => Err(StoreError::db("settle")(e)),
    }
}

/// A connection, within `timeout`.
async fn connect<C>(
    connecting: impl Future<Output = Result<C, sqlx::Error>>,
    timeout: Duration,
) -> Result<C, StoreError> {
    match tokio::time::timeout(timeout, connecting).await {
        Ok(conn) => conn.map_err(StoreError::db("settle connect")),
        Err(_) => Err(StoreError::ConnectTimeout(timeout)),
    }
}
