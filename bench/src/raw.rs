//! `outboxd-bench`'s raw baselines: a plain sqlx client on the same database and table as the
//! other shapes, with no outboxd code in the loop (no store, no worker, no publisher), so the
//! report can print outboxd's rate as a ratio to what a hand-written client gets.
//!
//! - [`RawLoop::TwoWrite`] (shape `raw`): issue 10's raw two-write SQL loop. N clients each
//!   repeat: claim a batch (`pending` → `delivering` with the client's `worker_id` and a lease,
//!   rows locked with `FOR UPDATE SKIP LOCKED`, committed), then one fenced mark
//!   `UPDATE … SET status = 'delivered' WHERE key IN (…) AND worker_id = ? AND status =
//!   'delivering' AND lock_until_ms = ?`. Every row is written twice, as outboxd writes it. The
//!   fence names the lease's `lock_until_ms` too: on a never-analyzed PostgreSQL table (the
//!   benchmark table is never analyzed) the planner reads a mark fenced on `status` alone through
//!   `idx_…_lease` by `(app_code, status)`, every `delivering` entry of the tenant dead or alive,
//!   and filters the keys (~200 ms per mark late in a 200k drain); with `lock_until_ms` that
//!   index range holds exactly the batch.
//! - [`RawLoop::Held`] (shape `raw-held`): the headroom ceiling. One transaction per batch:
//!   `SELECT … FOR UPDATE SKIP LOCKED` holds the row locks, one `UPDATE` to `delivered`, commit.
//!   Every row is written once; a client that dies mid-batch costs no attempt and leaves no trace,
//!   which is why outboxd does not deliver this way by default.
//!
//! The SQL per database lives here on purpose: this is a baseline, not the store.
//! - PostgreSQL: the claim is one `UPDATE … WHERE app_code = $ AND event_id IN (SELECT … FOR
//!   UPDATE SKIP LOCKED LIMIT n) RETURNING`; keys are bound as one array (`= ANY($n)`).
//! - MariaDB / MySQL (no `UPDATE … RETURNING`): `SELECT … FOR UPDATE SKIP LOCKED`, then
//!   `UPDATE … WHERE app_code = ? AND event_id IN (?, …)`, in one `READ COMMITTED` transaction
//!   (the session level outboxd's own pool uses). The key list is `app_code = ? AND event_id IN`
//!   rather than a row constructor `(app_code, event_id) IN ((?, ?), …)`, which MariaDB does not
//!   read as a primary-key range (see the git history of docs/PERFORMANCE.md, "MariaDB enqueue note").
//! - SQLite (no row locks): the PostgreSQL-shaped claim without `FOR UPDATE SKIP LOCKED`, in one
//!   `BEGIN IMMEDIATE` transaction (the write lock serializes the clients).

use std::time::Duration;

use sqlx::AssertSqlSafe;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};
use tokio::task::JoinSet;

use outboxd::record::now_ms;
use outboxd::store::{Backend, StoreError, TableName};

/// Lease the two-write loop writes into `lock_until_ms` (never expires within a run).
const LEASE_MS: i64 = 60_000;

/// Which raw loop to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawLoop {
    /// Claim (commit), then a fenced mark: two writes per row.
    TwoWrite,
    /// Lock, mark `delivered`, commit in one transaction: one write per row.
    Held,
}

/// What one raw run drains.
#[derive(Debug, Clone)]
pub struct RawOptions {
    /// The database URL.
    pub url: String,
    /// The benchmark table (already migrated).
    pub table: TableName,
    /// The app code whose `pending` rows are drained.
    pub app_code: String,
    /// Concurrent clients, each on its own connection.
    pub clients: u32,
    /// Rows per claim.
    pub batch_size: u32,
    /// Longest wait for a connection.
    pub connect_timeout: Duration,
}

/// Errors of a raw run.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// A statement or connection failed.
    #[error("raw loop: {0}")]
    Store(#[from] StoreError),
    /// The fenced mark changed fewer rows than the client had claimed.
    #[error(
        "raw loop: client {client} claimed {claimed} rows but its fenced mark changed {marked}"
    )]
    Fence {
        /// The client's `worker_id`.
        client: String,
        /// Rows claimed.
        claimed: usize,
        /// Rows the mark changed.
        marked: u64,
    },
    /// A client task panicked or was cancelled.
    #[error("raw loop: a client task ended abnormally: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Drains every `pending` row of `options.app_code` with `options.clients` plain clients; returns
/// once every client found nothing left to claim.
pub async fn drain(raw: RawLoop, options: &RawOptions) -> Result<(), RawError> {
    let clients = options.clients.max(1);
    let mut tasks = JoinSet::new();
    match Backend::from_url(&options.url)? {
        Backend::Postgres => {
            let pool = PgPoolOptions::new()
                .max_connections(clients)
                .acquire_timeout(options.connect_timeout)
                .connect(&options.url)
                .await
                .map_err(StoreError::db("raw connect"))?;
            for client in 0..clients {
                let c = Client::new(options, client);
                tasks.spawn(postgres(pool.clone(), c, raw));
            }
        }
        Backend::MySql => {
            let pool = MySqlPoolOptions::new()
                .max_connections(clients)
                .acquire_timeout(options.connect_timeout)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::Executor::execute(
                            &mut *conn,
                            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                        )
                        .await?;
                        Ok(())
                    })
                })
                .connect(&options.url)
                .await
                .map_err(StoreError::db("raw connect"))?;
            for client in 0..clients {
                let c = Client::new(options, client);
                tasks.spawn(mysql(pool.clone(), c, raw));
            }
        }
        Backend::Sqlite => {
            let connect = outboxd::store::internals::sqlite_connect_options(&options.url)?;
            let pool = SqlitePoolOptions::new()
                .max_connections(clients)
                .acquire_timeout(options.connect_timeout)
                .connect_with(connect)
                .await
                .map_err(StoreError::db("raw connect"))?;
            for client in 0..clients {
                let c = Client::new(options, client);
                tasks.spawn(sqlite(pool.clone(), c, raw));
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// One client's identity and statements' fixed parts.
struct Client {
    table: String,
    app_code: String,
    worker_id: String,
    batch_size: i64,
}

impl Client {
    fn new(options: &RawOptions, n: u32) -> Client {
        Client {
            table: options.table.as_str().to_string(),
            app_code: options.app_code.clone(),
            worker_id: format!("raw-{n}"),
            batch_size: i64::from(options.batch_size.max(1)),
        }
    }

    /// The `pending` rows of the app code in claim order, `limit` placeholder last.
    fn pending(&self, placeholder_app: &str, placeholder_limit: &str, lock: &str) -> String {
        format!(
            "SELECT event_id FROM {t} WHERE app_code = {placeholder_app} AND status = 'pending' \
             ORDER BY created_at_ms, event_id LIMIT {placeholder_limit}{lock}",
            t = self.table
        )
    }

    /// Checks that a fenced mark changed every claimed row.
    fn fenced(&self, claimed: usize, marked: u64) -> Result<(), RawError> {
        if marked == claimed as u64 {
            return Ok(());
        }
        Err(RawError::Fence {
            client: self.worker_id.clone(),
            claimed,
            marked,
        })
    }
}

/// `?, ?, …` (`n` placeholders).
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The PostgreSQL client loop.
async fn postgres(pool: PgPool, c: Client, raw: RawLoop) -> Result<(), RawError> {
    let t = &c.table;
    let claim = format!(
        "UPDATE {t} SET status = 'delivering', worker_id = $1, lock_until_ms = $2, \
         updated_at_ms = $3 WHERE app_code = $4 AND event_id IN ({}) RETURNING event_id, envelope",
        c.pending("$4", "$5", " FOR UPDATE SKIP LOCKED")
    );
    let mark = format!(
        "UPDATE {t} SET status = 'delivered', updated_at_ms = $1 WHERE app_code = $2 \
         AND event_id = ANY($3) AND worker_id = $4 AND status = 'delivering' \
         AND lock_until_ms = $5"
    );
    let lock = format!(
        "SELECT event_id, envelope FROM {t} WHERE app_code = $1 AND status = 'pending' \
         ORDER BY created_at_ms, event_id LIMIT $2 FOR UPDATE SKIP LOCKED"
    );
    let deliver = format!(
        "UPDATE {t} SET status = 'delivered', updated_at_ms = $1 WHERE app_code = $2 \
         AND event_id = ANY($3)"
    );
    loop {
        let now = now_ms();
        let ids: Vec<String> = match raw {
            RawLoop::TwoWrite => {
                let rows = sqlx::query(AssertSqlSafe(claim.as_str()))
                    .bind(&c.worker_id)
                    .bind(now + LEASE_MS)
                    .bind(now)
                    .bind(&c.app_code)
                    .bind(c.batch_size)
                    .fetch_all(&pool)
                    .await
                    .map_err(StoreError::db("raw claim"))?;
                let ids = event_ids(&rows)?;
                if ids.is_empty() {
                    return Ok(());
                }
                let marked = sqlx::query(AssertSqlSafe(mark.as_str()))
                    .bind(now_ms())
                    .bind(&c.app_code)
                    .bind(&ids)
                    .bind(&c.worker_id)
                    .bind(now + LEASE_MS)
                    .execute(&pool)
                    .await
                    .map_err(StoreError::db("raw mark"))?
                    .rows_affected();
                c.fenced(ids.len(), marked)?;
                ids
            }
            RawLoop::Held => {
                let mut tx = pool.begin().await.map_err(StoreError::db("raw begin"))?;
                let rows = sqlx::query(AssertSqlSafe(lock.as_str()))
                    .bind(&c.app_code)
                    .bind(c.batch_size)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(StoreError::db("raw lock"))?;
                let ids = event_ids(&rows)?;
                if !ids.is_empty() {
                    let marked = sqlx::query(AssertSqlSafe(deliver.as_str()))
                        .bind(now)
                        .bind(&c.app_code)
                        .bind(&ids)
                        .execute(&mut *tx)
                        .await
                        .map_err(StoreError::db("raw mark"))?
                        .rows_affected();
                    c.fenced(ids.len(), marked)?;
                }
                tx.commit().await.map_err(StoreError::db("raw commit"))?;
                ids
            }
        };
        if ids.is_empty() {
            return Ok(());
        }
    }
}

/// The MariaDB / MySQL client loop.
async fn mysql(pool: MySqlPool, c: Client, raw: RawLoop) -> Result<(), RawError> {
    let t = &c.table;
    let lock = format!(
        "SELECT event_id, envelope FROM {t} WHERE app_code = ? AND status = 'pending' \
         ORDER BY created_at_ms, event_id LIMIT ? FOR UPDATE SKIP LOCKED"
    );
    loop {
        let mut tx = pool.begin().await.map_err(StoreError::db("raw begin"))?;
        let rows = sqlx::query(AssertSqlSafe(lock.as_str()))
            .bind(&c.app_code)
            .bind(c.batch_size)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db("raw lock"))?;
        let ids = event_ids(&rows)?;
        if ids.is_empty() {
            tx.commit().await.map_err(StoreError::db("raw commit"))?;
            return Ok(());
        }
        let keys = placeholders(ids.len());
        let now = now_ms();
        match raw {
            RawLoop::TwoWrite => {
                let lease = format!(
                    "UPDATE {t} SET status = 'delivering', worker_id = ?, lock_until_ms = ?, \
                     updated_at_ms = ? WHERE app_code = ? AND event_id IN ({keys})"
                );
                let mut query = sqlx::query(AssertSqlSafe(lease))
                    .bind(&c.worker_id)
                    .bind(now + LEASE_MS)
                    .bind(now)
                    .bind(&c.app_code);
                for id in &ids {
                    query = query.bind(id);
                }
                query
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("raw claim"))?;
                tx.commit().await.map_err(StoreError::db("raw commit"))?;
                let mark = format!(
                    "UPDATE {t} SET status = 'delivered', updated_at_ms = ? WHERE app_code = ? \
                     AND event_id IN ({keys}) AND worker_id = ? AND status = 'delivering' \
                     AND lock_until_ms = ?"
                );
                let mut query = sqlx::query(AssertSqlSafe(mark))
                    .bind(now_ms())
                    .bind(&c.app_code);
                for id in &ids {
                    query = query.bind(id);
                }
                let marked = query
                    .bind(&c.worker_id)
                    .bind(now + LEASE_MS)
                    .execute(&pool)
                    .await
                    .map_err(StoreError::db("raw mark"))?
                    .rows_affected();
                c.fenced(ids.len(), marked)?;
            }
            RawLoop::Held => {
                let deliver = format!(
                    "UPDATE {t} SET status = 'delivered', updated_at_ms = ? WHERE app_code = ? \
                     AND event_id IN ({keys})"
                );
                let mut query = sqlx::query(AssertSqlSafe(deliver))
                    .bind(now)
                    .bind(&c.app_code);
                for id in &ids {
                    query = query.bind(id);
                }
                let marked = query
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("raw mark"))?
                    .rows_affected();
                c.fenced(ids.len(), marked)?;
                tx.commit().await.map_err(StoreError::db("raw commit"))?;
            }
        }
    }
}

/// The SQLite client loop.
async fn sqlite(pool: SqlitePool, c: Client, raw: RawLoop) -> Result<(), RawError> {
    let t = &c.table;
    let claim = format!(
        "UPDATE {t} SET status = 'delivering', worker_id = ?, lock_until_ms = ?, \
         updated_at_ms = ? WHERE app_code = ? AND event_id IN ({}) RETURNING event_id, envelope",
        c.pending("?", "?", "")
    );
    let held = format!(
        "UPDATE {t} SET status = 'delivered', updated_at_ms = ? \
         WHERE app_code = ? AND event_id IN ({}) RETURNING event_id, envelope",
        c.pending("?", "?", "")
    );
    loop {
        let now = now_ms();
        let mut tx = pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(StoreError::db("raw begin"))?;
        let rows = match raw {
            RawLoop::TwoWrite => sqlx::query(AssertSqlSafe(claim.as_str()))
                .bind(&c.worker_id)
                .bind(now + LEASE_MS)
                .bind(now),
            RawLoop::Held => sqlx::query(AssertSqlSafe(held.as_str())).bind(now),
        }
        .bind(&c.app_code)
        .bind(&c.app_code)
        .bind(c.batch_size)
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("raw claim"))?;
        tx.commit().await.map_err(StoreError::db("raw commit"))?;
        let ids = event_ids(&rows)?;
        if ids.is_empty() {
            return Ok(());
        }
        if raw == RawLoop::TwoWrite {
            let mark = format!(
                "UPDATE {t} SET status = 'delivered', updated_at_ms = ? WHERE app_code = ? \
                 AND event_id IN ({}) AND worker_id = ? AND status = 'delivering' \
                 AND lock_until_ms = ?",
                placeholders(ids.len())
            );
            let mut query = sqlx::query(AssertSqlSafe(mark))
                .bind(now_ms())
                .bind(&c.app_code);
            for id in &ids {
                query = query.bind(id);
            }
            let marked = query
                .bind(&c.worker_id)
                .bind(now + LEASE_MS)
                .execute(&pool)
                .await
                .map_err(StoreError::db("raw mark"))?
                .rows_affected();
            c.fenced(ids.len(), marked)?;
        }
    }
}

/// The `event_id` column of claimed rows. The statements fetch the envelope too (a client would
/// hand it on), so the wire carries the same bytes as outboxd's claim.
fn event_ids<R>(rows: &[R]) -> Result<Vec<String>, StoreError>
where
    R: sqlx::Row,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    rows.iter()
        .map(|row| row.try_get::<String, _>("event_id"))
        .collect::<Result<_, _>>()
        .map_err(StoreError::db("raw claim"))
}
