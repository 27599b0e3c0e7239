//! Test database factory shared by the integration tests: one isolated database per test, per backend.
//!
//! Every test calls [`TestDb::new`] and gets its own database, so the tests of a file run in
//! parallel without seeing each other's rows:
//! - **SQLite**: a file in a fresh temporary directory (`sqlite:///tmp/…/outbox.db?mode=rwc`);
//! - **MariaDB**: `CREATE DATABASE outboxd_t_<random>` on `mysql://root@127.0.0.1:3306/test`
//!   (override with `OUTBOXD_TEST_MYSQL_URL`);
//! - **PostgreSQL**: `CREATE DATABASE outboxd_t_<random>` on `postgres://postgres@127.0.0.1:5432/postgres`
//!   (override with `OUTBOXD_TEST_POSTGRES_URL`).
//!
//! The database is dropped when the [`TestDb`] drops (best effort, on a helper thread; set
//! `OUTBOXD_TEST_KEEP_DB=1` to keep it for a post-mortem), or explicitly with [`TestDb::cleanup`].
//!
//! When a server does not answer, [`TestDb::new`] returns `None` after printing a loud
//! `SKIPPED (no MariaDB at …)` line to stderr, so `cargo test` on a laptop without the servers still
//! runs the SQLite tests; with `CI=true` in the environment it panics instead, so CI can never pass
//! by skipping.
//!
//! Besides the store itself ([`TestDb::store`]), the guard offers plain-sqlx access to the table
//! for what the `OutboxStore` trait cannot (or must not) do: insert a hand-made row such as a corrupt
//! envelope ([`TestDb::insert_raw`]), read a row's columns for assertions ([`TestDb::row`]), run
//! arbitrary statements ([`TestDb::execute`]), run the backend's `save` inside a transaction the
//! test owns ([`TestDb::save_in_transaction`]), and read query plans ([`TestDb::explain`]).
//!
//! ```ignore
//! mod support;
//! use support::{Backend, TestDb};
//!
//! let Some(db) = TestDb::new(Backend::MySql).await else { return }; // skipped (not in CI)
//! let store = db.store_default().await;                              // migrated `room_outbox`
//! store.enqueue(&[support::record("app", "e1", "room-1", 1_000)]).await.unwrap();
//! assert_eq!(db.row("app", "e1").await.unwrap().status, "pending");
//! ```

#![allow(dead_code)] // each test file uses a different part of this module

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::Rng;
use sqlx::{AssertSqlSafe, Connection, Executor, Row};

pub use outboxd::record::Record;
pub use outboxd::store::{Backend, ConnectOptions, OutboxStore, TableName};

/// Env var overriding the MariaDB server URL (must name an existing database, e.g. `/test`).
pub const MYSQL_URL_ENV: &str = "OUTBOXD_TEST_MYSQL_URL";
/// Env var overriding the PostgreSQL server URL (must name an existing database).
pub const POSTGRES_URL_ENV: &str = "OUTBOXD_TEST_POSTGRES_URL";
/// Default MariaDB server URL.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// Default PostgreSQL server URL.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// How long to wait for a server before calling it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Plain sqlx access to a test database, one pool type per backend.
#[derive(Clone)]
pub enum RawPool {
    /// SQLite pool.
    Sqlite(sqlx::SqlitePool),
    /// MariaDB / MySQL pool.
    MySql(sqlx::MySqlPool),
    /// PostgreSQL pool.
    Postgres(sqlx::PgPool),
}

/// A bound value for [`TestDb::execute`], [`TestDb::explain`] and raw inserts.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// An integer.
    I64(i64),
    /// A string.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// SQL NULL for an integer column.
    NullI64,
    /// SQL NULL for a text column.
    NullStr,
}

/// A row to insert with plain SQL, bypassing the store (e.g. a corrupt envelope, or bulk history).
/// Columns left `None` take the table's default.
#[derive(Debug, Clone)]
pub struct RawInsert {
    /// Tenant.
    pub app_code: String,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Room.
    pub room_id: String,
    /// Status column value.
    pub status: String,
    /// Raw envelope bytes.
    pub envelope: Vec<u8>,
    /// Claim order key.
    pub created_at_ms: i64,
    /// Failed attempts.
    pub retry_count: Option<i64>,
    /// Last error.
    pub last_error: Option<String>,
    /// Lease owner.
    pub worker_id: Option<String>,
    /// Lease end.
    pub lock_until_ms: Option<i64>,
    /// Next retry time.
    pub next_retry_at_ms: Option<i64>,
    /// Last change time (defaults to `created_at_ms`).
    pub updated_at_ms: Option<i64>,
}

impl RawInsert {
    /// A `pending` row whose envelope is the valid encoding of [`record`]`(app, event_id, room, created_at_ms)`.
    pub fn pending(app: &str, event_id: &str, room: &str, created_at_ms: i64) -> RawInsert {
        let r = record(app, event_id, room, created_at_ms);
        RawInsert {
            app_code: r.app_code.clone(),
            event_id: r.event_id.clone(),
            event_type: r.event_type.clone(),
            room_id: r.room_id.clone(),
            status: "pending".into(),
            envelope: r.encoded_envelope(),
            created_at_ms,
            retry_count: None,
            last_error: None,
            worker_id: None,
            lock_until_ms: None,
            next_retry_at_ms: None,
            updated_at_ms: None,
        }
    }

    /// The same row with another status.
    pub fn with_status(mut self, status: &str) -> RawInsert {
        self.status = status.into();
        self
    }

    /// The same row with another envelope.
    pub fn with_envelope(mut self, envelope: Vec<u8>) -> RawInsert {
        self.envelope = envelope;
        self
    }

    /// Column names and values of this row, in insert order (only the columns that are set).
    fn columns(&self) -> Vec<(&'static str, Bind)> {
        let mut cols = vec![
            ("app_code", Bind::Str(self.app_code.clone())),
            ("event_id", Bind::Str(self.event_id.clone())),
            ("event_type", Bind::Str(self.event_type.clone())),
            ("room_id", Bind::Str(self.room_id.clone())),
            ("status", Bind::Str(self.status.clone())),
            ("envelope", Bind::Bytes(self.envelope.clone())),
            ("created_at_ms", Bind::I64(self.created_at_ms)),
            (
                "updated_at_ms",
                Bind::I64(self.updated_at_ms.unwrap_or(self.created_at_ms)),
            ),
        ];
        if let Some(v) = self.retry_count {
            cols.push(("retry_count", Bind::I64(v)));
        }
        if let Some(v) = &self.last_error {
            cols.push(("last_error", Bind::Str(v.clone())));
        }
        if let Some(v) = &self.worker_id {
            cols.push(("worker_id", Bind::Str(v.clone())));
        }
        if let Some(v) = self.lock_until_ms {
            cols.push(("lock_until_ms", Bind::I64(v)));
        }
        if let Some(v) = self.next_retry_at_ms {
            cols.push(("next_retry_at_ms", Bind::I64(v)));
        }
        cols
    }
}

/// A row's columns as stored, for assertions. An empty `worker_id` (the column's default before
/// the first claim and after a requeue) reads as `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    /// Tenant.
    pub app_code: String,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Room.
    pub room_id: String,
    /// Status column.
    pub status: String,
    /// Envelope bytes.
    pub envelope: Vec<u8>,
    /// Claim order key.
    pub created_at_ms: i64,
    /// Failed attempts.
    pub retry_count: i64,
    /// Last error (NULL → `None`).
    pub last_error: Option<String>,
    /// Lease owner (NULL or `''` → `None`).
    pub worker_id: Option<String>,
    /// Lease end.
    pub lock_until_ms: Option<i64>,
    /// Next retry time.
    pub next_retry_at_ms: Option<i64>,
    /// Last change.
    pub updated_at_ms: i64,
}

impl RawRow {
    /// True when the row carries no lease: `lock_until_ms` is NULL, so no claim's fence matches
    /// it any more (`worker_id` keeps the last claimer, for the record).
    pub fn lease_cleared(&self) -> bool {
        self.lock_until_ms.is_none()
    }
}

/// One step of a query plan, normalised across MariaDB and PostgreSQL.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanStep {
    /// MariaDB: the `type` column (`range`, `ref`, `ALL`, `index`, …). PostgreSQL: the node type
    /// (`Index Scan`, `Index Only Scan`, `Seq Scan`, `Limit`, `LockRows`, …).
    pub access: String,
    /// The table the step reads, when it reads one.
    pub table: Option<String>,
    /// The index used (MariaDB `key`; PostgreSQL `using …`).
    pub index: Option<String>,
    /// Estimated rows (MariaDB `rows`; PostgreSQL `rows=` of the estimate).
    pub rows: Option<f64>,
    /// Rows actually read per loop, from [`TestDb::explain_analyze`] (MariaDB `r_rows`;
    /// PostgreSQL `actual … rows=`); `None` from a plain [`TestDb::explain`].
    pub actual_rows: Option<f64>,
    /// The whole step as text (MariaDB: every column; PostgreSQL: the plan line and its detail lines).
    pub text: String,
}

/// One isolated test database and what is needed to drop it.
pub struct TestDb {
    /// Which database.
    pub backend: Backend,
    /// URL of this test's own database (pass it to `ConnectOptions`).
    pub url: String,
    /// Plain sqlx pool on [`TestDb::url`].
    pub pool: RawPool,
    /// SQLite: the directory holding the file (deleted on drop).
    dir: Option<tempfile::TempDir>,
    /// Server databases: (admin URL, database name) to drop on cleanup.
    drop_info: Option<(String, String)>,
}

/// The URL of the server for `backend` (env override or default).
pub fn server_url(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => "sqlite::memory:".to_string(),
        Backend::MySql => std::env::var(MYSQL_URL_ENV).unwrap_or_else(|_| DEFAULT_MYSQL_URL.into()),
        Backend::Postgres => {
            std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| DEFAULT_POSTGRES_URL.into())
        }
    }
}

/// Human name of a backend's server, for skip messages.
fn server_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SQLite",
        Backend::MySql => "MariaDB",
        Backend::Postgres => "PostgreSQL",
    }
}

/// True when running in CI (`CI=true`), where an unreachable server fails the test.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `url` with its database path replaced by `database` (query string kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("URL has a scheme");
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or(before_query);
    let mut out = format!("{scheme}://{authority}/{database}");
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A fresh random database name `outboxd_t_<16 hex>`.
fn random_db_name() -> String {
    let n: u64 = rand::rng().random();
    format!("outboxd_t_{n:016x}")
}

impl TestDb {
    /// A fresh, empty database for `backend`; `None` (after a loud SKIPPED line) when the server
    /// is unreachable outside CI. Panics in CI (`CI=true`) or on any other error.
    pub async fn new(backend: Backend) -> Option<TestDb> {
        match backend {
            Backend::Sqlite => Some(Self::new_sqlite().await),
            Backend::MySql | Backend::Postgres => Self::new_server(backend).await,
        }
    }

    /// Like [`TestDb::new`] for a server, but also returns `None` quietly for SQLite: for tests
    /// that only make sense on a server (e.g. EXPLAIN plans).
    pub async fn new_server_only(backend: Backend) -> Option<TestDb> {
        if backend == Backend::Sqlite {
            return None;
        }
        Self::new(backend).await
    }

    async fn new_sqlite() -> TestDb {
        let dir = tempfile::Builder::new()
            .prefix("outboxd_t_")
            .tempdir()
            .expect("create temp dir");
        let path = dir.path().join("outbox.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().expect("sqlite url");
        let options = options
            .busy_timeout(Duration::from_secs(30))
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let pool = sqlx::pool::PoolOptions::<sqlx::Sqlite>::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("open sqlite test database");
        TestDb {
            backend: Backend::Sqlite,
            url,
            pool: RawPool::Sqlite(pool),
            dir: Some(dir),
            drop_info: None,
        }
    }

    async fn new_server(backend: Backend) -> Option<TestDb> {
        let admin_url = server_url(backend);
        let name = random_db_name();
        let created = tokio::time::timeout(CONNECT_TIMEOUT, async {
            match backend {
                Backend::MySql => {
                    let mut conn = sqlx::MySqlConnection::connect(&admin_url).await?;
                    conn.execute(AssertSqlSafe(format!(
                        "CREATE DATABASE {name} CHARACTER SET utf8mb4"
                    )))
                    .await?;
                    conn.close().await
                }
                Backend::Postgres => {
                    let mut conn = sqlx::PgConnection::connect(&admin_url).await?;
                    conn.execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                        .await?;
                    conn.close().await
                }
                Backend::Sqlite => unreachable!(),
            }
        })
        .await;
        let unreachable = match created {
            Err(_elapsed) => Some(format!("timed out after {CONNECT_TIMEOUT:?}")),
            Ok(Err(e @ (sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut))) => Some(e.to_string()),
            Ok(Err(e)) => panic!(
                "creating test database {name} on {}: {e}",
                outboxd::store::redact_url(&admin_url)
            ),
            Ok(Ok(())) => None,
        };
        if let Some(why) = unreachable {
            let what = format!(
                "no {} at {} ({why})",
                server_name(backend),
                outboxd::store::redact_url(&admin_url)
            );
            if in_ci() {
                panic!("{what}: CI=true, so tests against it must not be skipped");
            }
            eprintln!("\n========== SKIPPED ({what}) ==========\n");
            return None;
        }
        let url = with_database(&admin_url, &name);
        let pool = match backend {
            Backend::MySql => RawPool::MySql(
                sqlx::pool::PoolOptions::new()
                    .max_connections(4)
                    .connect(&url)
                    .await
                    .expect("connect to test database"),
            ),
            Backend::Postgres => RawPool::Postgres(
                sqlx::pool::PoolOptions::new()
                    .max_connections(4)
                    .connect(&url)
                    .await
                    .expect("connect to test database"),
            ),
            Backend::Sqlite => unreachable!(),
        };
        Some(TestDb {
            backend,
            url,
            pool,
            dir: None,
            drop_info: Some((admin_url, name)),
        })
    }

    /// Connect options for this database and `table`.
    pub fn options(&self, table: &str) -> ConnectOptions {
        ConnectOptions {
            url: self.url.clone(),
            table: TableName::new(table).expect("valid table name"),
            max_connections: 4,
            ..ConnectOptions::new(self.url.clone())
        }
    }

    /// A new store (its own connection pool) on `table`, migrated.
    pub async fn store(&self, table: &str) -> Arc<dyn OutboxStore> {
        let store = self.store_unmigrated(table).await;
        store.migrate().await.expect("migrate");
        store
    }

    /// A new store on the default table `room_outbox`, migrated.
    pub async fn store_default(&self) -> Arc<dyn OutboxStore> {
        self.store(outboxd::store::DEFAULT_TABLE).await
    }

    /// A new store (its own connection pool) on `table`, not migrated.
    pub async fn store_unmigrated(&self, table: &str) -> Arc<dyn OutboxStore> {
        outboxd::store::connect(&self.options(table))
            .await
            .unwrap_or_else(|e| panic!("connect store to {}: {e}", self.url))
    }

    /// Placeholder number `n` (1-based) in this backend's syntax.
    pub fn placeholder(&self, n: usize) -> String {
        match self.backend {
            Backend::Postgres => format!("${n}"),
            _ => "?".to_string(),
        }
    }

    /// Runs one statement with binds, returning rows affected.
    pub async fn execute(&self, sql: &str, binds: &[Bind]) -> u64 {
        macro_rules! run {
            ($pool:expr) => {{
                let mut q = sqlx::query(AssertSqlSafe(sql.to_string()));
                for b in binds {
                    q = match b {
                        Bind::I64(v) => q.bind(*v),
                        Bind::Str(v) => q.bind(v.clone()),
                        Bind::Bytes(v) => q.bind(v.clone()),
                        Bind::NullI64 => q.bind(None::<i64>),
                        Bind::NullStr => q.bind(None::<String>),
                    };
                }
                q.execute($pool)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
                    .rows_affected()
            }};
        }
        match &self.pool {
            RawPool::Sqlite(p) => run!(p),
            RawPool::MySql(p) => run!(p),
            RawPool::Postgres(p) => run!(p),
        }
    }

    /// Inserts rows into `table` with plain SQL (one multi-row INSERT per call; keep it under a
    /// few thousand rows per call).
    pub async fn insert_raw(&self, table: &str, rows: &[RawInsert]) {
        let mut by_shape: Vec<(Vec<&'static str>, Vec<Vec<Bind>>)> = Vec::new();
        for row in rows {
            let cols = row.columns();
            let names: Vec<&'static str> = cols.iter().map(|(n, _)| *n).collect();
            let values: Vec<Bind> = cols.into_iter().map(|(_, v)| v).collect();
            match by_shape.iter_mut().find(|(n, _)| *n == names) {
                Some((_, vs)) => vs.push(values),
                None => by_shape.push((names, vec![values])),
            }
        }
        for (names, values) in by_shape {
            let mut n = 0;
            let tuples: Vec<String> = values
                .iter()
                .map(|v| {
                    let ph: Vec<String> = v
                        .iter()
                        .map(|_| {
                            n += 1;
                            self.placeholder(n)
                        })
                        .collect();
                    format!("({})", ph.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO {table} ({}) VALUES {}",
                names.join(", "),
                tuples.join(", ")
            );
            let binds: Vec<Bind> = values.into_iter().flatten().collect();
            self.execute(&sql, &binds).await;
        }
    }

    /// The row `(app_code, event_id)` of `room_outbox`, if present.
    pub async fn row(&self, app_code: &str, event_id: &str) -> Option<RawRow> {
        self.row_in(outboxd::store::DEFAULT_TABLE, app_code, event_id)
            .await
    }

    /// The row `(app_code, event_id)` of `table`, if present.
    pub async fn row_in(&self, table: &str, app_code: &str, event_id: &str) -> Option<RawRow> {
        let rows = self
            .rows_where(
                table,
                &format!(
                    "app_code = {} AND event_id = {}",
                    self.placeholder(1),
                    self.placeholder(2)
                ),
                &[Bind::Str(app_code.into()), Bind::Str(event_id.into())],
            )
            .await;
        assert!(
            rows.len() <= 1,
            "primary key (app_code, event_id) not unique"
        );
        rows.into_iter().next()
    }

    /// Every row of `table`, ordered by (app_code, created_at_ms, event_id).
    pub async fn all_rows(&self, table: &str) -> Vec<RawRow> {
        self.rows_where(table, "1 = 1", &[]).await
    }

    /// Rows of `table` matching a raw `WHERE` condition (use [`TestDb::placeholder`] for binds).
    pub async fn rows_where(&self, table: &str, condition: &str, binds: &[Bind]) -> Vec<RawRow> {
        let sql = format!(
            "SELECT app_code, event_id, event_type, room_id, status, envelope, created_at_ms, \
             retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms \
             FROM {table} WHERE {condition} ORDER BY app_code, created_at_ms, event_id"
        );
        macro_rules! fetch {
            ($pool:expr, $db:ty) => {{
                let mut q = sqlx::query::<$db>(AssertSqlSafe(sql.clone()));
                for b in binds {
                    q = match b {
                        Bind::I64(v) => q.bind(*v),
                        Bind::Str(v) => q.bind(v.clone()),
                        Bind::Bytes(v) => q.bind(v.clone()),
                        Bind::NullI64 => q.bind(None::<i64>),
                        Bind::NullStr => q.bind(None::<String>),
                    };
                }
                let rows = q
                    .fetch_all($pool)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter()
                    .map(|r| RawRow {
                        app_code: get_str::<$db>(r, "app_code").unwrap_or_default(),
                        event_id: get_str::<$db>(r, "event_id").unwrap_or_default(),
                        event_type: get_str::<$db>(r, "event_type").unwrap_or_default(),
                        room_id: get_str::<$db>(r, "room_id").unwrap_or_default(),
                        status: get_str::<$db>(r, "status").unwrap_or_default(),
                        envelope: get_bytes::<$db>(r, "envelope").unwrap_or_default(),
                        created_at_ms: get_i64::<$db>(r, "created_at_ms").expect("created_at_ms"),
                        retry_count: get_i64::<$db>(r, "retry_count").unwrap_or(0),
                        last_error: get_str::<$db>(r, "last_error"),
                        worker_id: get_str::<$db>(r, "worker_id").filter(|w| !w.is_empty()),
                        lock_until_ms: get_i64::<$db>(r, "lock_until_ms"),
                        next_retry_at_ms: get_i64::<$db>(r, "next_retry_at_ms"),
                        updated_at_ms: get_i64::<$db>(r, "updated_at_ms").unwrap_or(0),
                    })
                    .collect()
            }};
        }
        match &self.pool {
            RawPool::Sqlite(p) => fetch!(p, sqlx::Sqlite),
            RawPool::MySql(p) => fetch!(p, sqlx::MySql),
            RawPool::Postgres(p) => fetch!(p, sqlx::Postgres),
        }
    }

    /// Whether `table` exists in this database.
    pub async fn table_exists(&self, table: &str) -> bool {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE 1 = 0");
        match &self.pool {
            RawPool::Sqlite(p) => sqlx::query(AssertSqlSafe(sql.clone()))
                .fetch_all(p)
                .await
                .is_ok(),
            RawPool::MySql(p) => sqlx::query(AssertSqlSafe(sql.clone()))
                .fetch_all(p)
                .await
                .is_ok(),
            RawPool::Postgres(p) => sqlx::query(AssertSqlSafe(sql.clone()))
                .fetch_all(p)
                .await
                .is_ok(),
        }
    }

    /// Runs the backend's producer `save` inside a transaction this helper owns, then commits
    /// (`commit = true`) or rolls back. `batches` are saved one after another in that same
    /// transaction; returns each save's result. A failed save still ends the transaction as asked.
    pub async fn save_in_transaction(
        &self,
        table: &str,
        batches: &[Vec<Record>],
        commit: bool,
    ) -> Vec<Result<u64, outboxd::store::StoreError>> {
        let table = TableName::new(table).expect("valid table name");
        let mut results = Vec::new();
        macro_rules! in_tx {
            ($pool:expr, $save:path) => {{
                let mut tx = $pool.begin().await.expect("begin");
                for batch in batches {
                    results.push($save(&mut tx, &table, batch).await);
                }
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
            }};
        }
        match &self.pool {
            RawPool::Sqlite(p) => in_tx!(p, outboxd::store::sqlite::save),
            RawPool::MySql(p) => in_tx!(p, outboxd::store::mysql::save),
            RawPool::Postgres(p) => in_tx!(p, outboxd::store::postgres::save),
        }
        results
    }

    /// The plan of `sql` (with `binds`) on MariaDB (`EXPLAIN`) or PostgreSQL (`EXPLAIN`, text
    /// format, parsed into steps). Panics on SQLite.
    pub async fn explain(&self, sql: &str, binds: &[Bind]) -> Vec<PlanStep> {
        self.plan(sql, binds, false).await
    }

    /// Runs `sql` (it is executed!) and returns its plan with the rows actually read: MariaDB
    /// `ANALYZE <sql>`, PostgreSQL `EXPLAIN (ANALYZE) <sql>`. Panics on SQLite.
    pub async fn explain_analyze(&self, sql: &str, binds: &[Bind]) -> Vec<PlanStep> {
        self.plan(sql, binds, true).await
    }

    async fn plan(&self, sql: &str, binds: &[Bind], analyze: bool) -> Vec<PlanStep> {
        let explain = match (self.backend, analyze) {
            (_, false) => format!("EXPLAIN {sql}"),
            (Backend::Postgres, true) => format!("EXPLAIN (ANALYZE) {sql}"),
            (_, true) => format!("ANALYZE {sql}"),
        };
        macro_rules! rows {
            ($pool:expr, $db:ty) => {{
                let mut q = sqlx::query::<$db>(AssertSqlSafe(explain.clone()));
                for b in binds {
                    q = match b {
                        Bind::I64(v) => q.bind(*v),
                        Bind::Str(v) => q.bind(v.clone()),
                        Bind::Bytes(v) => q.bind(v.clone()),
                        Bind::NullI64 => q.bind(None::<i64>),
                        Bind::NullStr => q.bind(None::<String>),
                    };
                }
                q.fetch_all($pool)
                    .await
                    .unwrap_or_else(|e| panic!("{explain}: {e}"))
            }};
        }
        match &self.pool {
            RawPool::MySql(p) => {
                let rows = rows!(p, sqlx::MySql);
                rows.iter()
                    .map(|r| {
                        use sqlx::Column;
                        let text = r
                            .columns()
                            .iter()
                            .map(|c| {
                                let v = get_str::<sqlx::MySql>(r, c.name())
                                    .or_else(|| {
                                        get_i64::<sqlx::MySql>(r, c.name()).map(|i| i.to_string())
                                    })
                                    .or_else(|| {
                                        r.try_get::<Option<f64>, _>(c.name())
                                            .ok()
                                            .flatten()
                                            .map(|f| f.to_string())
                                    })
                                    .unwrap_or_else(|| "NULL".into());
                                format!("{}={v}", c.name())
                            })
                            .collect::<Vec<_>>()
                            .join(" ");
                        PlanStep {
                            access: get_str::<sqlx::MySql>(r, "type").unwrap_or_default(),
                            table: get_str::<sqlx::MySql>(r, "table"),
                            index: get_str::<sqlx::MySql>(r, "key"),
                            rows: get_i64::<sqlx::MySql>(r, "rows").map(|v| v as f64).or_else(
                                || get_str::<sqlx::MySql>(r, "rows").and_then(|s| s.parse().ok()),
                            ),
                            actual_rows: r
                                .try_get::<Option<f64>, _>("r_rows")
                                .ok()
                                .flatten()
                                .or_else(|| {
                                    get_str::<sqlx::MySql>(r, "r_rows").and_then(|s| s.parse().ok())
                                }),
                            text,
                        }
                    })
                    .collect()
            }
            RawPool::Postgres(p) => {
                let rows = rows!(p, sqlx::Postgres);
                let lines: Vec<String> = rows
                    .iter()
                    .map(|r| r.try_get::<String, _>(0).expect("plan line"))
                    .collect();
                parse_pg_plan(&lines)
            }
            RawPool::Sqlite(_) => panic!("explain() is for MariaDB and PostgreSQL"),
        }
    }

    /// Refreshes the planner statistics of `table` (`ANALYZE TABLE` / `ANALYZE`).
    pub async fn analyze(&self, table: &str) {
        let sql = match self.backend {
            Backend::MySql => format!("ANALYZE TABLE {table}"),
            Backend::Postgres | Backend::Sqlite => format!("ANALYZE {table}"),
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

    /// The indexes of `table` from the catalog: lower-case index name → key columns in order.
    pub async fn index_columns(
        &self,
        table: &str,
    ) -> std::collections::BTreeMap<String, Vec<String>> {
        let sql = match self.backend {
            Backend::Sqlite => "SELECT il.name, ii.name FROM pragma_index_list(?) il \
                                JOIN pragma_index_info(il.name) ii ORDER BY il.name, ii.seqno"
                .to_string(),
            Backend::MySql => "SELECT index_name, column_name FROM information_schema.statistics \
                               WHERE table_schema = DATABASE() AND table_name = ? \
                               ORDER BY index_name, seq_in_index"
                .to_string(),
            Backend::Postgres => "SELECT i.relname::text, a.attname::text FROM pg_index x \
                                  JOIN pg_class t ON t.oid = x.indrelid \
                                  JOIN pg_class i ON i.oid = x.indexrelid \
                                  CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                                  JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
                                  WHERE t.relname = $1 AND t.relnamespace = current_schema()::regnamespace \
                                  ORDER BY i.relname, k.ord"
                .to_string(),
        };
        macro_rules! fetch {
            ($pool:expr) => {{
                let rows = sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(table.to_string())
                    .fetch_all($pool)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                rows.iter()
                    .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
                    .collect::<Vec<_>>()
            }};
        }
        let rows = match &self.pool {
            RawPool::Sqlite(p) => fetch!(p),
            RawPool::MySql(p) => fetch!(p),
            RawPool::Postgres(p) => fetch!(p),
        };
        let mut indexes = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (index, column) in rows {
            indexes
                .entry(index.to_lowercase())
                .or_default()
                .push(column.to_lowercase());
        }
        indexes
    }

    /// Drops the database now (server backends) and deletes the SQLite file.
    pub async fn cleanup(mut self) {
        if let Some((admin_url, name)) = self.drop_info.take() {
            self.close_pool().await;
            drop_database(self.backend, &admin_url, &name).await;
        }
    }

    async fn close_pool(&self) {
        match &self.pool {
            RawPool::Sqlite(p) => p.close().await,
            RawPool::MySql(p) => p.close().await,
            RawPool::Postgres(p) => p.close().await,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.drop_info.take() else {
            return;
        };
        if std::env::var_os("OUTBOXD_TEST_KEEP_DB").is_some() {
            eprintln!("keeping test database {name} (OUTBOXD_TEST_KEEP_DB)");
            return;
        }
        let backend = self.backend;
        // Drop runs inside the test's runtime, where we cannot block on async work: a helper
        // thread with its own runtime drops the database, and we wait for it (bounded).
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async {
                let _ = tokio::time::timeout(
                    Duration::from_secs(20),
                    drop_database(backend, &admin_url, &name),
                )
                .await;
            });
        });
        let _ = handle.join();
    }
}

/// Drops a test database, best effort (errors are printed, not raised).
async fn drop_database(backend: Backend, admin_url: &str, name: &str) {
    let result: Result<(), sqlx::Error> = async {
        match backend {
            Backend::MySql => {
                let mut conn = sqlx::MySqlConnection::connect(admin_url).await?;
                conn.execute("SET SESSION lock_wait_timeout = 10").await?;
                conn.execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                    .await?;
                conn.close().await
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(admin_url).await?;
                conn.execute(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .await?;
                conn.close().await
            }
            Backend::Sqlite => Ok(()),
        }
    }
    .await;
    if let Err(e) = result {
        eprintln!("warning: could not drop test database {name}: {e}");
    }
}

/// Parses PostgreSQL's text `EXPLAIN` output into steps (one per `->` node plus the top node).
pub fn parse_pg_plan(lines: &[String]) -> Vec<PlanStep> {
    let mut steps: Vec<PlanStep> = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        let is_node = steps.is_empty() || trimmed.starts_with("->");
        if !is_node {
            if let Some(last) = steps.last_mut() {
                last.text.push('\n');
                last.text.push_str(trimmed);
            }
            continue;
        }
        let body = trimmed.trim_start_matches("->").trim_start();
        let head = body.split("  (").next().unwrap_or(body);
        let (head_no_on, table) = match head.split_once(" on ") {
            Some((h, t)) => (
                h,
                Some(t.split_whitespace().next().unwrap_or(t).to_string()),
            ),
            None => (head, None),
        };
        let (access, index) = match head_no_on.split_once(" using ") {
            Some((a, i)) => (a.to_string(), Some(i.trim().to_string())),
            None => (head_no_on.trim().to_string(), None),
        };
        // `Bitmap Index Scan on idx` names the index after "on".
        let (index, table) = if access == "Bitmap Index Scan" {
            (table, None)
        } else {
            (index, table)
        };
        let number_after = |text: &str, key: &str| -> Option<f64> {
            text.split(key)
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit() && c != '.').next())
                .and_then(|s| s.parse().ok())
        };
        let rows = number_after(body, "rows=");
        let actual_rows = body
            .split("(actual ")
            .nth(1)
            .and_then(|s| number_after(s, "rows="));
        steps.push(PlanStep {
            access,
            table,
            index,
            rows,
            actual_rows,
            text: body.to_string(),
        });
    }
    steps
}

fn get_i64<'r, DB>(row: &'r DB::Row, col: &str) -> Option<i64>
where
    DB: sqlx::Database,
    usize: sqlx::ColumnIndex<DB::Row>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i32: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i16: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    if let Ok(v) = row.try_get::<Option<i64>, _>(col) {
        return v;
    }
    if let Ok(v) = row.try_get::<Option<i32>, _>(col) {
        return v.map(i64::from);
    }
    if let Ok(v) = row.try_get::<Option<i16>, _>(col) {
        return v.map(i64::from);
    }
    try_unsigned::<DB>(row, col)
}

fn try_unsigned<DB: sqlx::Database>(row: &DB::Row, col: &str) -> Option<i64>
where
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
{
    // MySQL unsigned columns: decode through the MySQL row type when that is what we have.
    let any: &dyn std::any::Any = row;
    if let Some(r) = any.downcast_ref::<sqlx::mysql::MySqlRow>() {
        if let Ok(v) = r.try_get::<Option<u64>, _>(col) {
            return v.map(|v| v as i64);
        }
        if let Ok(v) = r.try_get::<Option<u32>, _>(col) {
            return v.map(i64::from);
        }
        if let Ok(v) = r.try_get::<Option<u16>, _>(col) {
            return v.map(i64::from);
        }
        if let Ok(v) = r.try_get::<Option<u8>, _>(col) {
            return v.map(i64::from);
        }
        if let Ok(v) = r.try_get::<Option<i8>, _>(col) {
            return v.map(i64::from);
        }
    }
    None
}

fn get_str<'r, DB>(row: &'r DB::Row, col: &str) -> Option<String>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    String: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    Vec<u8>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    if let Ok(v) = row.try_get::<Option<String>, _>(col) {
        return v;
    }
    row.try_get::<Option<Vec<u8>>, _>(col)
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn get_bytes<'r, DB>(row: &'r DB::Row, col: &str) -> Option<Vec<u8>>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    Vec<u8>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    row.try_get::<Option<Vec<u8>>, _>(col).ok().flatten()
}

/// A valid record of tenant `app` in `room`, with a fixed `event_id` and `created_at_ms`; event
/// type `T.<room>`, room version = `created_at_ms`, body = the event id.
pub fn record(app: &str, event_id: &str, room: &str, created_at_ms: i64) -> Record {
    let mut r = Record::build(
        room,
        format!("T.{room}"),
        created_at_ms,
        SystemTime::UNIX_EPOCH + Duration::from_millis(created_at_ms.max(0) as u64),
        &event_id.to_string(),
    )
    .with_app_code(app)
    .with_event_id(event_id);
    r.created_at_ms = created_at_ms;
    r
}

/// A record like [`record`] with an explicit event type.
pub fn typed_record(
    app: &str,
    event_id: &str,
    room: &str,
    event_type: &str,
    created_at_ms: i64,
) -> Record {
    let mut r = record(app, event_id, room, created_at_ms);
    r.event_type = event_type.to_string();
    r.envelope.event_type = event_type.to_string();
    r
}
