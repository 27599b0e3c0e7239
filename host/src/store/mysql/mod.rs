//! The MySQL / MariaDB backend: [`MySqlStore`] and the producer [`save`].
//!
//! A row's partition is the indexed virtual column `outbox_partition` (`partitions.rs`). The
//! store's own connections run at `READ COMMITTED` (`SESSION_SETUP`); `save` runs at the
//! caller's level.

use sqlx::MySql;
use sqlx::mysql::MySqlPool;

mod dialect;
mod partitions;
mod save;
mod status;

use super::exec;
use super::exec_mark::MarkOps;
use super::impl_store::impl_store;
use super::session::{BindTextList, impl_session};
use super::statement::rows::Statements;
use super::{Backend, ConnectOptions, StoreError, TableName};

use crate::record::Record;
pub(crate) use dialect::MySqlDialect;

/// The outbox in a MySQL or MariaDB database.
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    statements: Statements,
}

impl MySqlStore {
    /// Connects to `options.url` (`mysql://user:password@host:3306/db`) and checks that the
    /// server is one outboxd supports ([`StoreError::UnsupportedServer`] otherwise).
    pub async fn connect(options: &ConnectOptions) -> Result<MySqlStore, StoreError> {
        super::connect::probe::<sqlx::MySqlConnection>(&options.url, options.connect_timeout)
            .await?;
        let pool = super::connect::pool_options::<sqlx::MySql>(options)
            // READ COMMITTED: `SESSION_SETUP` explains why.
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::Executor::execute(&mut *conn, SESSION_SETUP).await?;
                    Ok(())
                })
            })
            .connect(&options.url)
            .await
            .map_err(StoreError::db("connect"))?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&pool)
            .await
            .map_err(StoreError::db("connect"))?;
        if let Err(err) = check_server_version(&version) {
            pool.close().await;
            return Err(err);
        }
        Ok(MySqlStore {
            pool,
            statements: Statements::new(Backend::MySql, &options.table),
        })
    }

    /// The connection pool, e.g. to open the transaction [`save`] writes in.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

/// Accepts MariaDB ≥ 10.6 and MySQL ≥ 8.0, given `VERSION()` such as
/// `10.11.6-MariaDB-0+deb12u1` or `8.0.36`. TiDB (`8.0.11-TiDB-v7.5.1`) is refused whatever its
/// version: it takes no shared lock (`LOCK IN SHARE MODE` is at most a no-op there), so a mark's
/// fence would not hold a takeover of its partition back.
fn check_server_version(version: &str) -> Result<(), StoreError> {
    if version.to_ascii_lowercase().contains("tidb") {
        return Err(StoreError::UnsupportedServer(format!(
            "TiDB ({version}) takes no shared lock, so a mark's fence would not hold another \
             host's takeover of its partition back; outboxd needs MySQL >= 8.0 or MariaDB >= 10.6"
        )));
    }
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    // Old MariaDB handshakes prefix "5.5.5-" for replication compatibility.
    let number = match version.strip_prefix("5.5.5-") {
        Some(rest) if mariadb => rest,
        _ => version,
    };
    let mut parts = number
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().ok());
    let parsed = parts.next().flatten().zip(parts.next().flatten());
    let (name, minimum) = if mariadb {
        ("MariaDB", (10, 6))
    } else {
        ("MySQL", (8, 0))
    };
    match parsed {
        Some(found) if found >= minimum => Ok(()),
        _ => Err(StoreError::UnsupportedServer(format!(
            "{name} {version} is older than outboxd supports; outboxd needs {name} >= {}.{}",
            minimum.0, minimum.1
        ))),
    }
}

/// Run once on every connection of a MySQL/MariaDB store's own pool, before any transaction.
///
/// Under the default `REPEATABLE READ`, a mark's UPDATE keeps next-key (gap) locks on every
/// index record it scanned (one partition's span of the partition index), so producers inserting
/// into that span wait for it, and writers taking those locks in another order deadlock.
/// `READ COMMITTED` locks only the rows changed, and reads the fence's partition row with the
/// shared lock the fence asks for (`LOCK IN SHARE MODE`). (With binary logging it needs `binlog_format`
/// ROW or MIXED, the defaults.) The producers' `save` runs in the caller's transaction, at the
/// caller's isolation level.
const SESSION_SETUP: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

impl_session!(sqlx::MySqlConnection, MySql);

/// No array parameter: the dialect writes `IN (?, …)`.
impl BindTextList for MySql {}

/// The mark as written once: the fenced UPDATE in autocommit, then, when it matched fewer rows
/// than marks, the rows it changed (MySQL has no `UPDATE … RETURNING`).
impl MarkOps for MySqlStore {}

impl_store!(MySqlStore, MySql);

/// Saves `records` as `pending` rows of `table` inside the caller's transaction, so they commit
/// (or roll back) together with the business change. Ids already present are ignored
/// (`ON DUPLICATE KEY UPDATE event_id = event_id`; other errors still fail); returns the rows
/// inserted. The count subtracts ids a consistent read saw before the insert, so it can be off
/// only when another transaction commits the same event id at the same moment.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::SystemTime;
/// use outboxd::record::Record;
/// use outboxd::store::mysql::save;
/// use outboxd::store::TableName;
///
/// let pool = sqlx::MySqlPool::connect("mysql://root@127.0.0.1:3306/app").await?;
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
    tx: &mut sqlx::Transaction<'_, MySql>,
    table: &TableName,
    records: &[Record],
) -> Result<u64, StoreError> {
    exec::save::<MySqlStore, _>(&mut **tx, table, records).await
}

#[cfg(test)]
mod tests {
    use super::check_server_version;

    #[test]
    fn supported_server_versions() {
        for ok in [
            "10.6.0-MariaDB",
            "10.11.6-MariaDB-0+deb12u1",
            "5.5.5-10.6.12-MariaDB",
            "11.4.2-MariaDB",
            "8.0.36",
            "8.4.0",
            "9.1.0-commercial",
        ] {
            assert!(check_server_version(ok).is_ok(), "{ok}");
        }
        for old in [
            "10.5.23-MariaDB",
            "10.3.39-MariaDB-0+deb10u1",
            "5.7.44-log",
            "8.0.11-TiDB-v7.5.1",
            "garbage",
        ] {
            assert!(check_server_version(old).is_err(), "{old}");
        }
    }
}
