//! A connection that runs bound statements: [`Session`], implemented for each backend's sqlx
//! connection type by [`impl_session!`], and how a database binds a key list ([`BindTextList`]).

use async_trait::async_trait;
use sqlx::Database;

use super::row::FromColumns;
use super::statement::{Arg, Bound};

/// A connection (or open transaction) that runs [`Bound`] statements.
#[async_trait]
pub(crate) trait Session: Send {
    /// Runs a statement; returns the rows it affected.
    async fn run(&mut self, statement: Bound) -> Result<u64, sqlx::Error>;

    /// Runs a query; decodes every row.
    async fn rows<T: FromColumns + Send + 'static>(
        &mut self,
        statement: Bound,
    ) -> Result<Vec<T>, sqlx::Error>;

    /// Runs a script of several statements without arguments (a migration).
    async fn script(&mut self, sql: String) -> Result<(), sqlx::Error>;
}

/// How a database binds an [`Arg::TextList`]: as one array parameter where it has arrays
/// (PostgreSQL); implemented in each backend's folder.
pub(crate) trait BindTextList: Database {
    /// `query` with `values` bound as the next parameter. Default: never called, no statement
    /// carries a list where the dialect does not bind lists as arrays.
    fn bind_text_list(
        _query: sqlx::query::Query<'static, Self, <Self as Database>::Arguments>,
        _values: Vec<String>,
    ) -> sqlx::query::Query<'static, Self, <Self as Database>::Arguments> {
        unreachable!("only a dialect that binds lists as arrays writes Arg::TextList")
    }
}

/// The sqlx query for `statement`, its arguments bound in order.
pub(crate) fn bind_args<DB>(
    statement: Bound,
) -> sqlx::query::Query<'static, DB, <DB as Database>::Arguments>
where
    DB: BindTextList,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    // The text comes from `store::statement`: static fragments and the validated table name only.
    let mut query = sqlx::query::<DB>(sqlx::AssertSqlSafe(statement.sql));
    for arg in statement.args {
        query = match arg {
            Arg::Text(value) => query.bind(value),
            Arg::Int(value) => query.bind(value),
            Arg::Bytes(value) => query.bind(value),
            Arg::TextList(values) => DB::bind_text_list(query, values),
        };
    }
    query
}

/// Implements [`Session`] for a sqlx connection type: `impl_session!(sqlx::SqliteConnection, sqlx::Sqlite);`.
macro_rules! impl_session {
    ($connection:ty, $database:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::session::Session for $connection {
            async fn run(
                &mut self,
                statement: $crate::store::statement::Bound,
            ) -> Result<u64, sqlx::Error> {
                let query = $crate::store::session::bind_args::<$database>(statement);
                Ok(query.execute(&mut *self).await?.rows_affected())
            }

            async fn rows<T: $crate::store::row::FromColumns + Send + 'static>(
                &mut self,
                statement: $crate::store::statement::Bound,
            ) -> Result<Vec<T>, sqlx::Error> {
                let query = $crate::store::session::bind_args::<$database>(statement);
                let rows = query.fetch_all(&mut *self).await?;
                rows.iter().map(|row| T::from_columns(row)).collect()
            }

            async fn script(&mut self, sql: String) -> Result<(), sqlx::Error> {
                // A migration file embedded in the binary, table name validated.
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(&mut *self)
                    .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use impl_session;
