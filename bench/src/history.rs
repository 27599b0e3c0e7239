//! Old `delivered` history for the benchmarks, written set-based on the database side
//! (`--retention` and `--history-scaling` share it; bench-only SQL, the store is not involved).
//!
//! One statement writes up to [`SQL_CHUNK`] rows and commits (autocommit): PostgreSQL
//! `INSERT … SELECT … FROM generate_series`, MariaDB/MySQL `INSERT … SELECT` over a cross join
//! of five ten-row digit tables (no recursive CTE: MariaDB stops one at
//! `max_recursive_iterations`, MySQL at `cte_max_recursion_depth`, 1000 by default), SQLite a
//! recursive CTE. Every row has the columns a producer plus a delivery would leave (status
//! `delivered`, `retry_count` 0, `worker_id` set, `lock_until_ms` NULL, `next_retry_at_ms` 0,
//! `updated_at_ms` 40 ms after `created_at_ms`) and one real encoded envelope, reused: its
//! `event_id` and `room_id` are left empty, which the claim's judge reads as "the row's value",
//! so every row would decode and pass the judge. Ids are `{prefix}{n:012}`, so they are unique
//! and ascending (the primary key grows at its end, as it does in production).
//!
//! After a load, [`AfterLoad`] says what statistics maintenance runs; see `docs/PERFORMANCE.md`
//! ("History does not slow claims") for why `analyze` is the default.

use std::str::FromStr as _;
use std::time::{Duration, SystemTime};

use sqlx::{ConnectOptions as _, Connection as _};

use outboxd::record::Record;
use outboxd::store::{Backend, Disposition, Mark, MarkParams, OutboxStore, StoreError, TableName};

/// Rows per load statement (one transaction each).
pub const SQL_CHUNK: u64 = 100_000;

/// How far in the past the history rows were created and delivered.
pub const HISTORY_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Errors of the history benchmarks (`--retention`, `--history-scaling`).
#[derive(Debug, thiserror::Error)]
pub enum HistoryBenchError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A claim handed out fewer rows than were just enqueued for it.
    #[error("{phase}: claimed {claimed} of {expected} rows")]
    ShortClaim {
        /// Loading the history or measuring.
        phase: &'static str,
        /// Rows handed out.
        claimed: usize,
        /// Rows expected.
        expected: u32,
    },
    /// The cleanup task panicked or was aborted.
    #[error("retention cleanup task: {0}")]
    Cleanup(#[from] tokio::task::JoinError),
}

/// The timed call of both history benchmarks: reads exactly `expected` rows at `at_ms` and
/// marks them delivered at `at_ms`.
pub async fn claim_and_deliver(
    store: &dyn OutboxStore,
    app_code: &str,
    expected: u32,
    at_ms: i64,
    phase: &'static str,
) -> Result<(), HistoryBenchError> {
    let batches = crate::read::read_due(store, app_code, "bench-history", expected, at_ms).await?;
    let claimed: usize = batches.iter().map(|b| b.events.len()).sum();
    if claimed != expected as usize {
        return Err(HistoryBenchError::ShortClaim {
            phase,
            claimed,
            expected,
        });
    }
    for batch in &batches {
        let marks: Vec<Mark> = batch
            .events
            .iter()
            .map(|c| Mark {
                event_id: c.event.event_id.clone(),
                disposition: Disposition::Delivered,
            })
            .collect();
        store
            .mark(&MarkParams {
                lease: &batch.lease,
                marks: &marks,
                now_ms: at_ms,
            })
            .await?;
    }
    Ok(())
}

/// Statistics maintenance run after each load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AfterLoad {
    /// Nothing: the planner sees whatever statistics it had before the load.
    None,
    /// `ANALYZE table` (PostgreSQL), `ANALYZE TABLE table` (MariaDB/MySQL), `ANALYZE` (SQLite):
    /// what autoanalyze would do in production soon after a load.
    Analyze,
    /// PostgreSQL `VACUUM ANALYZE table` (also sets the visibility map and hint bits, as
    /// autovacuum would); elsewhere the same as `analyze`.
    VacuumAnalyze,
}

impl AfterLoad {
    /// The name printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            AfterLoad::None => "none",
            AfterLoad::Analyze => "analyze",
            AfterLoad::VacuumAnalyze => "vacuum-analyze",
        }
    }
}

/// How a benchmark loads its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Loader {
    /// Set-based `INSERT … SELECT` statements of up to 100k rows each ([`HistoryWriter`]).
    Sql,
    /// Through the store: enqueue, claim and mark 1000 rows at a time (slow; every row goes
    /// through the real statements once).
    Store,
}

/// The history options shared by `--retention` and `--history-scaling` (flattened into
/// [`BenchArgs`](crate::args::BenchArgs)).
#[derive(Debug, Clone, clap::Args)]
pub struct HistoryArgs {
    /// How the history is loaded: `sql` (set-based, default) or `store` (through the store).
    #[arg(long, value_enum, default_value = "sql")]
    pub loader: Loader,
    /// Statistics maintenance after each history load: none, analyze, vacuum-analyze.
    #[arg(long, value_enum, default_value = "analyze")]
    pub after_load: AfterLoad,
}

/// One connection of the benchmark's database (statement logging off: every load statement
/// is "slow" by design).
enum Conn {
    Sqlite(sqlx::SqliteConnection),
    MySql(sqlx::MySqlConnection),
    Postgres(sqlx::PgConnection),
}

/// Writes old `delivered` rows of one tenant, set-based, on a connection of its own.
pub struct HistoryWriter {
    conn: Conn,
    table: TableName,
    app_code: String,
    id_prefix: String,
    base_ms: i64,
    envelope: Vec<u8>,
}

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    StoreError::db(op)
}

/// The envelope every history row carries: one real `RoomGiftSent` envelope of the tenant with
/// `event_id` and `room_id` empty (the row's values apply) and a 64-byte body.
pub fn history_envelope(app_code: &str, occurred_at_ms: i64) -> Vec<u8> {
    let mut record = Record::build("", "RoomGiftSent", 1, SystemTime::now(), &())
        .with_app_code(app_code)
        .with_event_id("");
    record.envelope.occurred_at_ms = occurred_at_ms;
    record.envelope.body = vec![7u8; 64];
    record.encoded_envelope()
}

impl HistoryWriter {
    /// Connects to `url` (the table must exist: migrate first). Rows get event ids
    /// `{id_prefix}{n:012}` and `created_at_ms = base_ms + n`.
    pub async fn connect(
        url: &str,
        table: &TableName,
        app_code: &str,
        id_prefix: &str,
        base_ms: i64,
    ) -> Result<HistoryWriter, StoreError> {
        let conn = match Backend::from_url(url)? {
            Backend::Sqlite => {
                let options = outboxd::store::internals::sqlite_connect_options(url)?
                    .disable_statement_logging();
                Conn::Sqlite(options.connect().await.map_err(db("history connect"))?)
            }
            Backend::MySql => {
                let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
                    .map_err(db("history connect"))?
                    .disable_statement_logging();
                Conn::MySql(options.connect().await.map_err(db("history connect"))?)
            }
            Backend::Postgres => {
                let options = sqlx::postgres::PgConnectOptions::from_str(url)
                    .map_err(db("history connect"))?
                    .disable_statement_logging();
                Conn::Postgres(options.connect().await.map_err(db("history connect"))?)
            }
        };
        Ok(HistoryWriter {
            conn,
            table: table.clone(),
            app_code: app_code.to_string(),
            id_prefix: id_prefix.to_string(),
            base_ms,
            envelope: history_envelope(app_code, base_ms),
        })
    }

    /// Writes rows `from..to` in statements of up to [`SQL_CHUNK`] rows, each committed, calling
    /// `progress(rows written so far)` after each.
    pub async fn load(
        &mut self,
        from: u64,
        to: u64,
        mut progress: impl FnMut(u64),
    ) -> Result<(), StoreError> {
        let mut start = from;
        while start < to {
            let end = to.min(start + SQL_CHUNK);
            self.load_chunk(start as i64, end as i64).await?;
            progress(end);
            start = end;
        }
        Ok(())
    }

    /// The column list of every load statement.
    const COLUMNS: &'static str = "(app_code, event_id, event_type, room_id, status, envelope, \
        created_at_ms, retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, \
        updated_at_ms)";

    async fn load_chunk(&mut self, from: i64, to: i64) -> Result<(), StoreError> {
        // The table name is a validated identifier (TableName); every value is bound.
        let (table, cols) = (self.table.as_str(), Self::COLUMNS);
        let op = "history load";
        match &mut self.conn {
            Conn::Postgres(conn) => {
                let sql = format!(
                    "INSERT INTO {table} {cols} SELECT $1, $2 || lpad(g::text, 12, '0'), \
                     'RoomGiftSent', 'room-' || (g % 1000), 'delivered', $3, $4 + g, 0, NULL, \
                     'bench-history', NULL, 0, $4 + g + 40 \
                     FROM generate_series($5::bigint, $6::bigint - 1) AS g"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(&self.app_code)
                    .bind(&self.id_prefix)
                    .bind(&self.envelope)
                    .bind(self.base_ms)
                    .bind(from)
                    .bind(to)
                    .execute(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
            Conn::MySql(conn) => {
                let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL \
                    SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL \
                    SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
                let sql = format!(
                    "INSERT INTO {table} {cols} SELECT ?, CONCAT(?, LPAD(n, 12, '0')), \
                     'RoomGiftSent', CONCAT('room-', n % 1000), 'delivered', ?, ? + n, 0, NULL, \
                     'bench-history', NULL, 0, ? + n + 40 FROM (SELECT ? + d0.d + 10 * d1.d + \
                     100 * d2.d + 1000 * d3.d + 10000 * d4.d AS n FROM {digits} d0 \
                     CROSS JOIN {digits} d1 CROSS JOIN {digits} d2 CROSS JOIN {digits} d3 \
                     CROSS JOIN {digits} d4) nums WHERE n < ? ORDER BY n"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(&self.app_code)
                    .bind(&self.id_prefix)
                    .bind(&self.envelope)
                    .bind(self.base_ms)
                    .bind(self.base_ms)
                    .bind(from)
                    .bind(to)
                    .execute(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
            Conn::Sqlite(conn) => {
                let sql = format!(
                    "WITH RECURSIVE s(n) AS (SELECT ? UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ?) \
                     INSERT INTO {table} {cols} SELECT ?, ? || printf('%012d', n), \
                     'RoomGiftSent', 'room-' || (n % 1000), 'delivered', ?, ? + n, 0, NULL, \
                     'bench-history', NULL, 0, ? + n + 40 FROM s"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(from)
                    .bind(to)
                    .bind(&self.app_code)
                    .bind(&self.id_prefix)
                    .bind(&self.envelope)
                    .bind(self.base_ms)
                    .bind(self.base_ms)
                    .execute(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
        }
        Ok(())
    }

    /// Runs the statistics maintenance `after` names on the table.
    pub async fn after_load(&mut self, after: AfterLoad) -> Result<(), StoreError> {
        let table = self.table.as_str();
        let op = "history analyze";
        match (&mut self.conn, after) {
            (_, AfterLoad::None) => {}
            (Conn::Postgres(conn), AfterLoad::Analyze) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ANALYZE {table}")))
                    .execute(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
            (Conn::Postgres(conn), AfterLoad::VacuumAnalyze) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
                    .execute(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
            (Conn::MySql(conn), _) => {
                // ANALYZE TABLE answers with a result set; read it to the end.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ANALYZE TABLE {table}")))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
            (Conn::Sqlite(conn), _) => {
                sqlx::raw_sql("ANALYZE")
                    .execute(&mut *conn)
                    .await
                    .map_err(db(op))?;
            }
        }
        Ok(())
    }

    /// Closes the connection.
    pub async fn close(self) {
        let _ = match self.conn {
            Conn::Sqlite(c) => c.close().await,
            Conn::MySql(c) => c.close().await,
            Conn::Postgres(c) => c.close().await,
        };
    }
}
