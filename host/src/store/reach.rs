//! Reaching the database fast and saying why not: one direct connection attempt under
//! `database.connect_timeout` before a pool is built (a pool retries a refused connection until
//! its acquire timeout and then reports only "pool timed out"), and which errors mean "the
//! database is unreachable" for the worker's outage log.

use std::time::Duration;

use super::StoreError;

/// Default of `database.connect_timeout`: how long a connection attempt (and a pool checkout)
/// may take before the database counts as unreachable.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens and closes one connection of type `C` to `url` within `timeout`, returning the driver's
/// own error ("connection refused", "access denied", "unknown database") or
/// [`StoreError::ConnectTimeout`].
pub async fn probe<C: sqlx::Connection>(url: &str, timeout: Duration) -> Result<(), StoreError> {
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

impl StoreError {
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
}
