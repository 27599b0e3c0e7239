//! The yardstick table of `outboxd-bench --shapes raw-1idx`: the seed's columns with only the
//! primary key and ONE claim index, `(app_code, status, created_at_ms, event_id)`, as issue 25
//! named the raw loop to compare against: its figure does not move when outboxd's own indexes
//! change (the partition index of live rows, and PostgreSQL's index of finished rows or
//! MariaDB's of failed ones); the raw two-write loop on this table pays one index. No triggers (PostgreSQL's commit notifications are outboxd's, not the yardstick's).
//!
//! The table is dropped and created fresh for each run, named `<table>_1idx`.

use std::time::Duration;

use sqlx::AssertSqlSafe;
use sqlx::pool::{Pool, PoolOptions};

use outboxd::store::{Backend, StoreError, TableName};

/// The yardstick table's name for the benchmark table `table`: `<table>_1idx`.
pub fn table_name(table: &TableName) -> Result<TableName, StoreError> {
    TableName::new(&format!("{}_1idx", table.as_str()))
}

/// The statements that create the yardstick table `t` on `backend`, after dropping it.
fn statements(backend: Backend, t: &str) -> Vec<String> {
    let (text, blob, collate, engine) = match backend {
        Backend::Postgres => ("VARCHAR", "BYTEA", " COLLATE \"C\"", ""),
        Backend::MySql => (
            "VARCHAR",
            "LONGBLOB",
            "",
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        ),
        Backend::Sqlite => ("VARCHAR", "BLOB", "", ""),
    };
    vec![
        format!("DROP TABLE IF EXISTS {t}"),
        format!(
            "CREATE TABLE {t} (
                app_code VARCHAR(64){collate} NOT NULL,
                event_id {text}(128){collate} NOT NULL,
                event_type {text}(128){collate} NOT NULL,
                room_id {text}(128){collate} NOT NULL,
                status {text}(16){collate} NOT NULL DEFAULT 'pending',
                envelope {blob} NOT NULL,
                created_at_ms BIGINT NOT NULL,
                retry_count INTEGER NOT NULL DEFAULT 0,
                last_error {text}(512) NULL,
                worker_id {text}(128){collate} NOT NULL DEFAULT '',
                lock_until_ms BIGINT NULL,
                next_retry_at_ms BIGINT NOT NULL DEFAULT 0,
                updated_at_ms BIGINT NOT NULL,
                PRIMARY KEY (app_code, event_id)
            ){engine}"
        ),
        format!("CREATE INDEX idx_{t}_claim ON {t} (app_code, status, created_at_ms, event_id)"),
    ]
}

/// Drops and creates the yardstick table `table` on the database at `url`.
pub async fn create(
    url: &str,
    table: &TableName,
    connect_timeout: Duration,
) -> Result<(), StoreError> {
    let backend = Backend::from_url(url)?;
    let statements = statements(backend, table.as_str());
    let connect = StoreError::db("yardstick connect");
    match backend {
        Backend::Postgres => {
            let pool = one_connection::<sqlx::Postgres>(connect_timeout)
                .connect(url)
                .await;
            execute_all(pool.map_err(connect)?, &statements).await
        }
        Backend::MySql => {
            let pool = one_connection::<sqlx::MySql>(connect_timeout)
                .connect(url)
                .await;
            execute_all(pool.map_err(connect)?, &statements).await
        }
        Backend::Sqlite => {
            let options = outboxd::store::internals::sqlite_connect_options(url)?;
            let pool = one_connection::<sqlx::Sqlite>(connect_timeout)
                .connect_with(options)
                .await;
            execute_all(pool.map_err(connect)?, &statements).await
        }
    }
}

/// A pool of one connection, waiting at most `connect_timeout` for it.
fn one_connection<DB: sqlx::Database>(connect_timeout: Duration) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(1)
        .acquire_timeout(connect_timeout)
}

/// Runs `statements` in order on `pool`, then closes it.
async fn execute_all<DB>(pool: Pool<DB>, statements: &[String]) -> Result<(), StoreError>
where
    DB: sqlx::Database,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    for sql in statements {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(&pool)
            .await
            .map_err(StoreError::db("yardstick table"))?;
    }
    pool.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_index_and_the_primary_key_only() {
        for backend in [Backend::Postgres, Backend::MySql, Backend::Sqlite] {
            let sql = statements(backend, "t_1idx").join(";\n");
            assert_eq!(sql.matches("CREATE INDEX").count(), 1, "{sql}");
            assert!(sql.contains("PRIMARY KEY (app_code, event_id)"), "{sql}");
            assert!(
                sql.contains("ON t_1idx (app_code, status, created_at_ms, event_id)"),
                "{sql}"
            );
            assert!(!sql.contains("TRIGGER"), "{sql}");
        }
    }

    #[test]
    fn the_name_follows_the_bench_table() {
        let table = TableName::new("outboxd_bench").unwrap();
        assert_eq!(table_name(&table).unwrap().as_str(), "outboxd_bench_1idx");
        let long = TableName::new(&"t".repeat(48)).unwrap();
        assert!(table_name(&long).is_err());
    }
}
