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
//! Every per-backend test is an `async fn NAME(backend: Backend)` listed in [`per_backend!`], which
//! makes one `#[tokio::test]` of it per database (`sqlite::NAME`, `mysql::NAME`, `postgres::NAME`).
//!
//! Files: this one creates and drops the databases; `raw.rs` is the plain-SQL access (bound
//! values, rows in and out), `schema.rs` hand-made tables and the indexes in the catalog,
//! `plan.rs` EXPLAIN plans, `records.rs` test records, `per_backend.rs` the macro, `wait.rs` the
//! one polling helper ([`wait_until`]: every wait in the tests is a poll on a condition),
//! `running.rs` a worker under test that reports its deliveries ([`Running`]), `child.rs` a binary
//! under test run to its end within a deadline ([`output_within`]).
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

#![allow(dead_code)] // the tests and bench_modes each use a different part of this module

mod child;
mod hand_host;
mod per_backend;
mod plan;
pub mod private_server;
mod raw;
mod records;
mod running;
mod schema;
pub mod tcp_proxy;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use sqlx::{AssertSqlSafe, Connection, Executor};

// The helpers this module offers; each test binary uses a different part of them.
#[allow(unused_imports)]
pub use child::output_within;
#[allow(unused_imports)]
pub use hand_host::{HandHost, all_delivered, mark_delivered};
pub use outboxd::record::Record;
#[allow(unused_imports)]
pub use outboxd::store::{Backend, ConnectOptions, OutboxStore, TableName};
#[allow(unused_imports)]
pub(crate) use per_backend::per_backend;
#[allow(unused_imports)]
pub use plan::{PlanStep, backlog, parse_pg_plan};
#[allow(unused_imports)]
pub use raw::{Bind, DIGITS, RawInsert, RawPool, RawRow};
#[allow(unused_imports)]
pub use records::{record, status_counts, typed_record};
#[allow(unused_imports)]
pub use running::{Running, until_loops_wait};
#[allow(unused_imports)]
pub use wait::{POLL_EVERY, wait_for, wait_until, wait_until_blocking, wait_until_every};

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

/// True when running in CI (`CI` set to anything but empty), where an unreachable server fails
/// the test.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty())
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

    /// A SQLite file in a fresh temporary directory (WAL, 30 s busy timeout).
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

    /// `CREATE DATABASE outboxd_t_<random>` on the server of `backend`, and a pool on it; `None`
    /// (loud SKIPPED line) when the server does not answer outside CI.
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

    /// Drops the database now (server backends) and deletes the SQLite file.
    pub async fn cleanup(mut self) {
        if let Some((admin_url, name)) = self.drop_info.take() {
            self.close_pool().await;
            drop_database(self.backend, &admin_url, &name).await;
        }
    }

    /// Closes the plain pool, so the database can be dropped.
    async fn close_pool(&self) {
        raw::on_pool!(&self.pool, |pool: DB| pool.close().await)
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
