//! From a database URL to a connected store: the URL's scheme names the [`Backend`], the backend
//! its dialect (`SqlDialect`, in the backend's folder) and store. What a database does is asked
//! of it (`dialect()`, [`Backend::commit_feed`]), not matched on its name.

use std::sync::Arc;

use super::connect::{ConnectOptions, redact_url};
use super::statement::SqlDialect;
use super::{Backend, CommitFeed, OutboxStore, StoreError, mysql, postgres, sqlite};

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
    /// PostgreSQL) rather than one at a time (SQLite's single write lock). The worker reads its
    /// next batch while the current one is marked only where they do.
    pub fn concurrent_writers(self) -> bool {
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

/// Connects to the database the URL names.
pub async fn connect(options: &ConnectOptions) -> Result<Arc<dyn OutboxStore>, StoreError> {
    Ok(match Backend::from_url(&options.url)? {
        Backend::Sqlite => Arc::new(sqlite::SqliteStore::connect(options).await?),
        Backend::MySql => Arc::new(mysql::MySqlStore::connect(options).await?),
        Backend::Postgres => Arc::new(postgres::PostgresStore::connect(options).await?),
    })
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
}
