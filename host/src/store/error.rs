//! [`StoreError`]: the errors of the storage layer, and which of them a retry can clear
//! ([`StoreError::is_transient`], [`StoreError::is_unreachable`]) — database errors are classified
//! here and nowhere else.

/// Errors of the storage layer. Database errors keep their source and name the operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A statement or connection failed.
    #[error("{op}: {source}")]
    Database {
        /// The store operation that failed (`mark`, `enqueue`, `rebalance`, …).
        op: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The URL's scheme is none of sqlite, mysql, postgres.
    #[error("unsupported database URL {0:?}: use sqlite://…, mysql://… or postgres://…")]
    UnsupportedUrl(String),
    /// The table name is not a plain SQL identifier.
    #[error(
        "invalid table name {0:?}: use letters, digits and '_' (not starting with a digit), at most 48 bytes"
    )]
    InvalidTableName(String),
    /// The database server is not one outboxd supports (too old, or TiDB).
    #[error("unsupported database server: {0}")]
    UnsupportedServer(String),
    /// A migration failed.
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        /// Migration number.
        version: i64,
        /// Migration file name.
        name: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// No connection to the database within `database.connect_timeout`.
    #[error(
        "connect: no answer within {} (database.connect_timeout)",
        humantime::format_duration(*.0)
    )]
    ConnectTimeout(std::time::Duration),
    /// A caller passed something the store cannot act on.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The outbox table does not fit outboxd (a missing column, or an index named like one
    /// outboxd needs with other columns) and `migrate` will not change it; the message says what to do.
    #[error("outbox table schema: {0}")]
    Schema(String),
    /// The table's partition count changed (`outboxd migrate --partitions`) since this store
    /// first read it: its reads and marks would name the old partitions.
    #[error(
        "{table} has {now} partitions per tenant, this host started with {was}: `outboxd migrate \
         --partitions` changed them while it ran; restart the host"
    )]
    PartitionsChanged {
        /// The outbox table.
        table: String,
        /// The count this store read first.
        was: u32,
        /// The catalog's count now.
        now: u32,
    },
}

impl StoreError {
    /// True for errors that a retry of the same operation can clear: a deadlock or serialization
    /// failure (SQLSTATE 40001, 40P01), a lock wait timeout (MySQL 1205), or a busy SQLite file.
    pub fn is_transient(&self) -> bool {
        let StoreError::Database {
            source: sqlx::Error::Database(db),
            ..
        } = self
        else {
            return false;
        };
        let code = db.code();
        matches!(code.as_deref(), Some("40001" | "40P01" | "5" | "6" | "517"))
            || db.message().contains("Lock wait timeout exceeded")
    }

    /// True when the database could not be reached at all (refused or broken connection, TLS
    /// failure, no connection within the timeout), as opposed to a statement that failed.
    pub fn is_unreachable(&self) -> bool {
        match self {
            StoreError::ConnectTimeout(_) => true,
            StoreError::Database {
                source: sqlx::Error::Database(db),
                ..
            } => {
                // SQLSTATE class 08 (connection exception); 57P01..57P03: the server is
                // shutting down or starting up.
                let code = db.code();
                let code = code.as_deref().unwrap_or("");
                code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
            }
            StoreError::Database { source, .. } => matches!(
                source,
                sqlx::Error::Io(_)
                    | sqlx::Error::Tls(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::WorkerCrashed
                    | sqlx::Error::Protocol(_)
            ),
            _ => false,
        }
    }

    /// Wraps a driver error with the operation it happened in.
    pub fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database { op, source }
    }
}
