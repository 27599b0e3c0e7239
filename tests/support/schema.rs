//! Schema helpers: tables made by hand the way another program made them
//! ([`TestDb::create_foreign_table`]), the indexes a table has ([`TestDb::index_columns`]) and
//! which build of an index is there ([`TestDb::index_identity`]).

use std::collections::BTreeMap;

use outboxd::store::internals::index_columns_query;
use sqlx::Row;

use super::raw::{Bind, RawPool, bound_query, on_pool};
use super::{Backend, TableName, TestDb};

impl TestDb {
    /// Drops the index `name` of `table` (MySQL/MariaDB name the table, the others do not).
    pub async fn drop_index(&self, table: &str, name: &str) {
        let sql = match self.backend {
            Backend::MySql => format!("DROP INDEX {name} ON {table}"),
            Backend::Sqlite | Backend::Postgres => format!("DROP INDEX {name}"),
        };
        self.execute(&sql, &[]).await;
    }

    /// Creates `table` by hand the way another program (the Go room-service) did: the outbox
    /// columns except `without`, primary key (app_code, event_id), none of outboxd's claim
    /// indexes, and the `indexes` given as (name, comma-separated columns).
    pub async fn create_foreign_table(
        &self,
        table: &str,
        without: &[&str],
        indexes: &[(&str, &str)],
    ) {
        let bytes = match self.backend {
            Backend::Sqlite => "BLOB",
            Backend::MySql => "LONGBLOB",
            Backend::Postgres => "BYTEA",
        };
        let columns = [
            ("app_code", "VARCHAR(64) NOT NULL"),
            ("event_id", "VARCHAR(128) NOT NULL"),
            ("event_type", "VARCHAR(128) NOT NULL"),
            ("room_id", "VARCHAR(128) NOT NULL"),
            ("status", "VARCHAR(16) NOT NULL DEFAULT 'pending'"),
            ("envelope", bytes),
            ("created_at_ms", "BIGINT NOT NULL"),
            ("retry_count", "INT NOT NULL DEFAULT 0"),
            ("last_error", "VARCHAR(512) NULL"),
            ("worker_id", "VARCHAR(128) NOT NULL DEFAULT ''"),
            ("lock_until_ms", "BIGINT NULL"),
            ("next_retry_at_ms", "BIGINT NOT NULL DEFAULT 0"),
            ("updated_at_ms", "BIGINT NOT NULL"),
        ];
        let columns: Vec<String> = columns
            .iter()
            .filter(|(name, _)| !without.contains(name))
            .map(|(name, ty)| format!("{name} {ty}"))
            .collect();
        self.execute(
            &format!(
                "CREATE TABLE {table} ({}, PRIMARY KEY (app_code, event_id))",
                columns.join(", ")
            ),
            &[],
        )
        .await;
        for (name, columns) in indexes {
            self.execute(&format!("CREATE INDEX {name} ON {table} ({columns})"), &[])
                .await;
        }
    }

    /// The indexes of `table` from the catalog: lower-case index name → key columns in order
    /// (`(expression)` for an expression key). Runs the store's own catalog query
    /// ([`outboxd::store::internals::index_columns_query`], the one migrate checks the claim indexes
    /// with) on this test's plain pool.
    pub async fn index_columns(&self, table: &str) -> BTreeMap<String, Vec<String>> {
        let table = TableName::new(table).expect("valid table name");
        let (sql, catalog_name) = index_columns_query(self.backend, &table);
        let rows: Vec<(String, Option<String>)> = on_pool!(&self.pool, |pool: DB| {
            bound_query::<DB>(&sql, &[Bind::Str(catalog_name)])
                .fetch_all(pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
        });
        let mut indexes = BTreeMap::<String, Vec<String>>::new();
        for (index, column) in rows {
            let column = column.unwrap_or_else(|| "(expression)".into());
            indexes
                .entry(index.to_lowercase())
                .or_default()
                .push(column.to_lowercase());
        }
        indexes
    }

    /// A value naming the build of index `index` of `table` (`None` when there is none), which
    /// changes when the index is dropped and created again: PostgreSQL its `pg_class` oid and
    /// file node; MariaDB its InnoDB index id; SQLite its root page and the schema cookie (which
    /// every schema change bumps, since a new build may reuse the freed root page).
    pub async fn index_identity(&self, table: &str, index: &str) -> Option<String> {
        let (p1, p2) = (self.placeholder(1), self.placeholder(2));
        let sql = match self.backend {
            Backend::Sqlite => format!(
                "SELECT rootpage || '/' || (SELECT schema_version FROM pragma_schema_version) \
                 FROM sqlite_master WHERE type = 'index' AND tbl_name = {p1} AND name = {p2}"
            ),
            Backend::Postgres => format!(
                "SELECT CAST(c.oid AS TEXT) || '/' || CAST(c.relfilenode AS TEXT) \
                 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid \
                 JOIN pg_class t ON t.oid = i.indrelid \
                 WHERE t.relname = {p1} AND c.relname = {p2}"
            ),
            Backend::MySql => format!(
                "SELECT CAST(i.index_id AS CHAR) FROM information_schema.INNODB_SYS_INDEXES i \
                 JOIN information_schema.INNODB_SYS_TABLES t ON t.table_id = i.table_id \
                 WHERE t.name = CONCAT(DATABASE(), '/', {p1}) AND i.name = {p2}"
            ),
        };
        let binds = [Bind::Str(table.into()), Bind::Str(index.into())];
        on_pool!(&self.pool, |pool: DB| {
            bound_query::<DB>(&sql, &binds)
                .fetch_optional(pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .map(|r| r.get::<String, _>(0))
        })
    }
}
