//! From a database URL to a connected store: the URL's scheme names the [`Backend`], the backend's
//! module connects. The only place in the store that names every backend.
//!
//! Every backend first makes one direct connection within `connect_timeout` ([`probe`]): a pool
//! retries a refused connection until its acquire timeout and then reports only "pool timed
//! out", hiding "Connection refused", "Access denied" or "Unknown database".

use std::sync::Arc;
use std::time::Duration;

use super::statement::SqlDialect;
use super::{Backend, OutboxStore, StoreError, TableName, mysql, postgres, sqlite};

impl Backend {
    /// The backend a database URL names, by its scheme.
    pub fn from_url(url: &str) -> Result<Backend, StoreError> {
        let scheme = url.split_once(':').map(|(s, _)| s).unwrap_or("");
        match scheme {
            "sqlite" => Ok(Backend::Sqlite),
            "mysql" | "mariadb" => Ok(Backend::MySql),
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            _ => Err(StoreError::UnsupportedUrl(redact_url(url))),
        }
    }

    /// What this database's SQL differs in (implemented in the backend's own file).
    pub(crate) fn dialect(self) -> &'static dyn SqlDialect {
        match self {
            Backend::Sqlite => &sqlite::SqliteDialect,
            Backend::MySql => &mysql::MySqlDialect,
            Backend::Postgres => &postgres::PostgresDialect,
        }
    }

    /// Whether write transactions on the outbox run side by side (row locks: MySQL / MariaDB,
    /// PostgreSQL) rather than one at a time (SQLite's single write lock). The worker claims its
    /// next batch while the current one is marked only where they do.
    pub fn concurrent_writers(self) -> bool {
        self.dialect().concurrent_writers()
    }

    /// Whether a claim can be held open while its batch publishes (`worker.mode = "held"`): where
    /// the database locks rows, so the open transaction stops no other writer (not SQLite, whose
    /// one write lock it would keep from every producer).
    pub fn holds_claims(self) -> bool {
        self.dialect().concurrent_writers()
    }

    /// What tells a host that rows were committed on this database (`crate::wake` starts it).
    pub fn commit_feed(self) -> CommitFeed {
        self.dialect().commit_feed()
    }

    /// Short lowercase name (`sqlite`, `mysql`, `postgres`), also the migrations folder name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::MySql => "mysql",
            Backend::Postgres => "postgres",
        }
    }
}

/// What wakes idle worker loops when rows are committed, by database ([`Backend::commit_feed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFeed {
    /// `LISTEN` on the channel the outbox table's triggers notify (PostgreSQL).
    Listen,
    /// `PRAGMA data_version` watched on a connection of its own (SQLite).
    DataVersion,
    /// The binary log followed as a replica would, where the server writes one and the user may
    /// read it (MySQL / MariaDB).
    Binlog,
}

/// Connection options shared by every backend.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The database URL (`sqlite://…`, `mysql://…`, `postgres://…`).
    pub url: String,
    /// The outbox table.
    pub table: TableName,
    /// Pool size.
    pub max_connections: u32,
    /// Longest wait for a new connection or a pool checkout ([`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
}

/// Default of `database.connect_timeout`: how long a connection attempt (and a pool checkout)
/// may take before the database counts as unreachable.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl ConnectOptions {
    /// Options for `url` with the default table and pool size.
    pub fn new(url: impl Into<String>) -> ConnectOptions {
        ConnectOptions {
            url: url.into(),
            table: TableName::default(),
            max_connections: 8,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// Connects to the database the URL names.
pub async fn connect(options: &ConnectOptions) -> Result<Arc<dyn OutboxStore>, StoreError> {
    Ok(match Backend::from_url(&options.url)? {
        Backend::Sqlite => Arc::new(sqlite::SqliteStore::connect(options).await?),
        Backend::MySql => Arc::new(mysql::MySqlStore::connect(options).await?),
        Backend::Postgres => Arc::new(postgres::PostgresStore::connect(options).await?),
    })
}

/// Opens and closes one connection of type `C` to `url` within `timeout`, returning the driver's
/// own error ("connection refused", "access denied", "unknown database") or
/// [`StoreError::ConnectTimeout`].
pub(crate) async fn probe<C: sqlx::Connection>(
    url: &str,
    timeout: Duration,
) -> Result<(), StoreError> {
    match tokio::time::timeout(timeout, C::connect(url)).await {
        Err(_elapsed) => Err(StoreError::ConnectTimeout(timeout)),
        Ok(Err(source)) => Err(StoreError::Database {
            op: "connect",
            source,
        }),
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
    }
}

/// The URL with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_from_url() {
        assert_eq!(Backend::from_url("sqlite://x.db").unwrap(), Backend::Sqlite);
        assert_eq!(
            Backend::from_url("mysql://root@h/db").unwrap(),
            Backend::MySql
        );
        assert_eq!(
            Backend::from_url("postgres://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert!(Backend::from_url("redis://h").is_err());
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("mysql://root:secret@h:3306/db"),
            "mysql://root:***@h:3306/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }
}
