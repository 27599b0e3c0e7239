//! What every backend's connect shares: the [`ConnectOptions`], one direct connection first
//! ([`probe`]: a pool retries a refused connection until its acquire timeout, then reports only
//! "pool timed out"), and the pool ([`pool_options`]). Which backend a URL names is `backend.rs`.

use std::time::Duration;

use sqlx::pool::PoolOptions;

use super::{StoreError, TableName};

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

/// A pooled connection idle at least this long is pinged before it is handed out; one used more
/// recently is handed out as it is ([`pool_options`]).
pub(crate) const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// The pool every backend starts from: `max_connections` (at least 1), `connect_timeout` as the
/// longest checkout wait, and a ping only for connections idle [`PING_IDLE_AFTER`] or longer.
///
/// sqlx's default pings every connection at checkout: one more round trip before each read and
/// each mark of a busy host, on its critical path. A connection that answered within the last
/// second is handed out unchecked; sqlx still pings each one as it comes back to the pool and
/// drops it if that fails, so a connection broken by a statement is not reused. What is left: a
/// connection used in the second before a restart fails its next statement once, which the
/// store handles like any statement the restart broke (a mark is retried, a read ends the round).
pub(crate) fn pool_options<DB: sqlx::Database>(options: &ConnectOptions) -> PoolOptions<DB> {
    PoolOptions::<DB>::new()
        .max_connections(options.max_connections.max(1))
        .acquire_timeout(options.connect_timeout)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IDLE_AFTER {
                    // An error drops this connection; the pool hands out another.
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
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
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("mysql://root:secret@h:3306/db"),
            "mysql://root:***@h:3306/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }
}
