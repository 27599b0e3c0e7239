//! The SQLite backend: [`SqliteStore`] and the producer [`save`].
//!
//! The database file is opened in WAL mode with a 30 s busy timeout, so several processes and
//! pools can share it, and `synchronous = NORMAL` unless the URL says otherwise
//! ([`synchronous_from_url`]); every write runs in `BEGIN IMMEDIATE`, serialized with other
//! writers. An in-memory URL (`sqlite::memory:`) gets a single, never-recycled connection: the
//! database lives as long as the store.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqliteSynchronous};

mod dialect;

use super::driver::{begin_write, db};
use super::exec;
use super::exec_mark::{MarkOps, event_ids};
use super::impl_store::impl_store;
use super::row::EventId;
use super::session::{BindTextList, Session, impl_session};
use super::statement::mark::{MarkAt, mark_rows, mark_rows_counted};
use super::statement::rows::Statements;
use super::{Backend, ConnectOptions, Lease, Mark, StoreError, TableName};

use crate::record::Record;
pub(crate) use dialect::SqliteDialect;

/// How long a statement waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How outboxd opens a SQLite database URL, for every connection it makes to the file (the
/// store's pool, the commit watcher, the benchmarks' plain clients): created if missing, WAL,
/// the busy timeout, and the URL's `synchronous` ([`synchronous_from_url`]).
pub(crate) fn connect_options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    let (url, synchronous) = synchronous_from_url(url)?;
    Ok(SqliteConnectOptions::from_str(&url)
        .map_err(StoreError::db("connect"))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(BUSY_TIMEOUT))
}

/// Takes outboxd's own `synchronous` parameter out of a SQLite URL (sqlx does not know it):
/// `off`, `normal` (the default) or `full` / `extra`, SQLite's `PRAGMA synchronous` for this
/// store's connections.
///
/// In WAL mode `NORMAL` syncs the WAL at checkpoints instead of at every commit (SQLite's own
/// advice for WAL): a commit survives a crash of outboxd or any other process; after a power
/// loss or an OS crash the last commits may be rolled back, whole. For the delivery path that
/// costs at most a redelivery (a mark rolled back leaves the row due). Rows enqueued through this
/// store (`outboxd enqueue`, [`super::OutboxStore::enqueue`]) could be lost with them: use
/// `synchronous=full` when that matters. Producers writing the file through their own
/// connections keep their own setting. Measured: a commit cost 2.6 ms with `FULL`, 0.04 ms with
/// `NORMAL` on the development machine (docs/PERFORMANCE.md).
pub fn synchronous_from_url(url: &str) -> Result<(String, SqliteSynchronous), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), SqliteSynchronous::Normal));
    };
    let mut synchronous = SqliteSynchronous::Normal;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("synchronous", value)) => {
                synchronous = match value.to_ascii_lowercase().as_str() {
                    "off" => SqliteSynchronous::Off,
                    "normal" => SqliteSynchronous::Normal,
                    "full" => SqliteSynchronous::Full,
                    "extra" => SqliteSynchronous::Extra,
                    _ => {
                        return Err(StoreError::Invalid(format!(
                            "database.url: synchronous={value} is not one of off, normal, full, extra"
                        )));
                    }
                }
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, synchronous))
}

/// The outbox in a SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    statements: Statements,
}

impl SqliteStore {
    /// Opens (creating if missing) the database `options.url` names (`sqlite://path`,
    /// `sqlite::memory:`).
    pub async fn connect(options: &ConnectOptions) -> Result<SqliteStore, StoreError> {
        let connect = connect_options(&options.url)?;
        let in_memory = options.url.contains(":memory:") || options.url.contains("mode=memory");
        let pool = if in_memory {
            super::connect::pool_options::<sqlx::Sqlite>(options)
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            super::connect::pool_options::<sqlx::Sqlite>(options)
        }
        .connect_with(connect)
        .await
        .map_err(StoreError::db("connect"))?;
        Ok(SqliteStore {
            pool,
            statements: Statements::new(Backend::Sqlite, &options.table),
        })
    }

    /// The connection pool, e.g. to open the transaction [`save`] writes in.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

impl_session!(sqlx::SqliteConnection, Sqlite);

/// No array parameter: the dialect writes `IN (?, …)`.
impl BindTextList for Sqlite {}

/// The mark in a write transaction: the fenced UPDATE without an id list first, committed when
/// its count says every row matched (SQLite counts every row an UPDATE writes; every mark
/// changes `status`), else rolled back and run again with `RETURNING event_id`. The count saves
/// handing 500 ids back row by row through the driver's channel (the git history of
/// docs/PERFORMANCE.md, "SQLite: a backlog of one timestamp").
impl MarkOps for SqliteStore {
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        at: MarkAt,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        let mut tx = begin_write(self, OP).await?;
        let counted = mark_rows_counted(&self.statements, lease, marks, at);
        if tx.run(counted).await.map_err(db(OP))? == marks.len() as u64 {
            tx.commit().await.map_err(db(OP))?;
            return Ok(event_ids(marks));
        }
        tx.rollback().await.map_err(db(OP))?;
        // Some row was stale (rare): the statement that lists the fenced rows it changes.
        let mut tx = begin_write(self, OP).await?;
        let update = mark_rows(&self.statements, lease, marks, at);
        let ids = tx.rows::<EventId>(update).await.map_err(db(OP))?;
        tx.commit().await.map_err(db(OP))?;
        Ok(ids)
    }
}

/// The producer insert as written once: its affected rows are the rows inserted.
impl exec::SaveOps for SqliteStore {
    const BACKEND: Backend = Backend::Sqlite;
}

impl_store!(SqliteStore, Sqlite);

/// Saves `records` as `pending` rows of `table` inside the caller's transaction, so they commit
/// (or roll back) together with the business change. Ids already present are ignored; returns
/// the rows inserted.
///
/// Open the transaction with `BEGIN IMMEDIATE` (`pool.begin_with("BEGIN IMMEDIATE")`) when it
/// reads before it writes, so it cannot fail to upgrade to a write lock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::SystemTime;
/// use outboxd::record::Record;
/// use outboxd::store::sqlite::{save, SqliteStore};
/// use outboxd::store::{ConnectOptions, OutboxStore};
///
/// let store = SqliteStore::connect(&ConnectOptions::new("sqlite::memory:")).await?;
/// store.migrate().await?;
///
/// let mut tx = store.pool().begin().await?;
/// // … the business change, on the same transaction …
/// let record = Record::build("room-42", "RoomGiftSent", 7, SystemTime::now(), &"rose".to_string());
/// assert_eq!(save(&mut tx, store.table(), &[record.clone()]).await?, 1);
/// assert_eq!(save(&mut tx, store.table(), &[record]).await?, 0); // idempotent
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub async fn save(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    table: &TableName,
    records: &[Record],
) -> Result<u64, StoreError> {
    exec::save::<SqliteStore, _>(&mut **tx, table, records).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronous_is_taken_out_of_the_url() {
        let (url, sync) = synchronous_from_url("sqlite://a.db?mode=rwc").unwrap();
        assert_eq!(
            (url.as_str(), sync),
            ("sqlite://a.db?mode=rwc", SqliteSynchronous::Normal)
        );
        let (url, sync) = synchronous_from_url("sqlite://a.db?synchronous=FULL&mode=rwc").unwrap();
        assert_eq!(
            (url.as_str(), sync),
            ("sqlite://a.db?mode=rwc", SqliteSynchronous::Full)
        );
        let (url, sync) = synchronous_from_url("sqlite://a.db?synchronous=off").unwrap();
        assert_eq!(
            (url.as_str(), sync),
            ("sqlite://a.db", SqliteSynchronous::Off)
        );
        let error = synchronous_from_url("sqlite://a.db?synchronous=fast").unwrap_err();
        assert!(error.to_string().contains("synchronous=fast"), "{error}");
    }

    #[tokio::test]
    async fn the_connection_runs_with_the_url_setting() {
        let dir = tempfile::tempdir().unwrap();
        for (query, expected) in [("", 1), ("&synchronous=full", 2)] {
            let url = format!("sqlite://{}/s.db?mode=rwc{query}", dir.path().display());
            let store = SqliteStore::connect(&ConnectOptions::new(url))
                .await
                .unwrap();
            let (level,): (i64,) = sqlx::query_as("PRAGMA synchronous")
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert_eq!(level, expected, "{query}");
        }
    }
}
