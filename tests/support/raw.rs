//! Plain-SQL access to a test database, around the store: raw pools, bound values, hand-made
//! rows in ([`TestDb::insert_raw`]) and stored rows out ([`TestDb::row`]) for assertions.

use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Row};

use super::{Backend, Record, TableName, TestDb, record};

/// A derived table of the digits 0–9 (column `d`): crossed with itself it numbers the rows of
/// one `INSERT … SELECT` that seeds a large history, on every database.
pub const DIGITS: &str = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                          UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL \
                          SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";

/// Plain sqlx access to a test database, one pool type per backend.
#[derive(Clone)]
pub enum RawPool {
    /// SQLite pool.
    Sqlite(sqlx::SqlitePool),
    /// MariaDB / MySQL pool.
    MySql(sqlx::MySqlPool),
    /// PostgreSQL pool.
    Postgres(sqlx::PgPool),
}

/// A bound value for [`TestDb::execute`], [`TestDb::explain`] and raw inserts.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    /// An integer.
    I64(i64),
    /// A string.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// SQL NULL for an integer column.
    NullI64,
    /// SQL NULL for a text column.
    NullStr,
    /// A list of strings as one array parameter (PostgreSQL's `text[]`; the store writes one only
    /// for a dialect with arrays).
    StrList(Vec<String>),
}

impl Bind {
    /// The value a store statement binds ([`outboxd::store::internals::Arg`]), to run that
    /// statement as it is here.
    pub fn from_arg(arg: &outboxd::store::internals::Arg) -> Bind {
        use outboxd::store::internals::Arg;
        match arg {
            Arg::Text(v) => Bind::Str(v.clone()),
            Arg::Int(v) => Bind::I64(*v),
            Arg::Bytes(v) => Bind::Bytes(v.clone()),
            Arg::TextList(v) => Bind::StrList(v.clone()),
        }
    }
}

/// How a database binds a [`Bind::StrList`]: as one array where it has arrays.
pub trait BindList: sqlx::Database {
    /// `query` with `values` bound as the next parameter.
    fn bind_list<'q>(
        query: Query<'q, Self, Self::Arguments>,
        values: Vec<String>,
    ) -> Query<'q, Self, Self::Arguments>;
}

impl BindList for sqlx::Postgres {
    fn bind_list<'q>(
        query: Query<'q, Self, Self::Arguments>,
        values: Vec<String>,
    ) -> Query<'q, Self, Self::Arguments> {
        query.bind(values)
    }
}

/// MySQL and SQLite have no array parameter (no statement of theirs carries a list).
macro_rules! no_list {
    ($database:ty) => {
        impl BindList for $database {
            fn bind_list<'q>(
                _query: Query<'q, Self, Self::Arguments>,
                _values: Vec<String>,
            ) -> Query<'q, Self, Self::Arguments> {
                panic!("{} has no array parameter", stringify!($database))
            }
        }
    };
}
no_list!(sqlx::MySql);
no_list!(sqlx::Sqlite);

/// Evaluates `$body` with `$pool` bound to the sqlx pool a [`RawPool`] holds and `$db` to that
/// pool's database type (`sqlx::Sqlite`, `sqlx::MySql`, `sqlx::Postgres`): one generic body
/// instead of one copy per backend. `on_pool!(&db.pool, |pool: DB| query::<DB>(…).execute(pool))`.
macro_rules! on_pool {
    ($raw:expr, |$pool:ident: $db:ident| $body:expr) => {
        match $raw {
            RawPool::Sqlite($pool) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                $body
            }
            RawPool::MySql($pool) => {
                #[allow(dead_code)]
                type $db = sqlx::MySql;
                $body
            }
            RawPool::Postgres($pool) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                $body
            }
        }
    };
}
pub(super) use on_pool;

/// `sql` as a query with `binds` bound in order: the one place a [`Bind`] becomes a sqlx argument.
pub(super) fn bound_query<'q, DB>(sql: &str, binds: &[Bind]) -> Query<'q, DB, DB::Arguments>
where
    DB: BindList,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> String: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Vec<u8>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Option<i64>: sqlx::Encode<'t, DB>,
    for<'t> Option<String>: sqlx::Encode<'t, DB>,
{
    let mut query = sqlx::query::<DB>(AssertSqlSafe(sql.to_string()));
    for bind in binds {
        query = match bind {
            Bind::I64(v) => query.bind(*v),
            Bind::Str(v) => query.bind(v.clone()),
            Bind::Bytes(v) => query.bind(v.clone()),
            Bind::NullI64 => query.bind(None::<i64>),
            Bind::NullStr => query.bind(None::<String>),
            Bind::StrList(v) => DB::bind_list(query, v.clone()),
        };
    }
    query
}

/// A row to insert with plain SQL, bypassing the store (e.g. a corrupt envelope, or bulk history).
/// Columns left `None` take the table's default.
#[derive(Debug, Clone)]
pub struct RawInsert {
    /// Tenant.
    pub app_code: String,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Room.
    pub room_id: String,
    /// Status column value.
    pub status: String,
    /// Raw envelope bytes.
    pub envelope: Vec<u8>,
    /// Claim order key.
    pub created_at_ms: i64,
    /// Failed attempts.
    pub retry_count: Option<i64>,
    /// Last error.
    pub last_error: Option<String>,
    /// Lease owner.
    pub worker_id: Option<String>,
    /// Lease end.
    pub lock_until_ms: Option<i64>,
    /// Next retry time.
    pub next_retry_at_ms: Option<i64>,
    /// Last change time (defaults to `created_at_ms`).
    pub updated_at_ms: Option<i64>,
}

impl RawInsert {
    /// A `pending` row whose envelope is the valid encoding of [`record`]`(app, event_id, room, created_at_ms)`.
    pub fn pending(app: &str, event_id: &str, room: &str, created_at_ms: i64) -> RawInsert {
        let r = record(app, event_id, room, created_at_ms);
        RawInsert {
            app_code: r.app_code.clone(),
            event_id: r.event_id.clone(),
            event_type: r.event_type.clone(),
            room_id: r.room_id.clone(),
            status: "pending".into(),
            envelope: r.encoded_envelope(),
            created_at_ms,
            retry_count: None,
            last_error: None,
            worker_id: None,
            lock_until_ms: None,
            next_retry_at_ms: None,
            updated_at_ms: None,
        }
    }

    /// The same row with another status.
    pub fn with_status(mut self, status: &str) -> RawInsert {
        self.status = status.into();
        self
    }

    /// The same row with another envelope.
    pub fn with_envelope(mut self, envelope: Vec<u8>) -> RawInsert {
        self.envelope = envelope;
        self
    }

    /// The live rows the plan tests (`explain`, `sqlite_plans`) put beside a history: `live` rows
    /// each of pending (`p00`, …), retryable due at 1_000 (`rd…`), retryable due at `later`
    /// (`rn…`), delivering with a lease ended at 1_000 (`dx…`), delivering leased until `later`
    /// (`dl…`) and failed (`f…`), of tenant `app`, in rooms `room0..room4`, created from
    /// `after + 1_000` on (each kind 100 ms after the previous one).
    pub fn live_rows_of_each_kind(app: &str, live: i64, after: i64, later: i64) -> Vec<RawInsert> {
        let kinds: [(&str, &str, Option<i64>, Option<i64>); 6] = [
            ("p", "pending", None, None),
            ("rd", "retryable", Some(1_000), None),
            ("rn", "retryable", Some(later), None),
            ("dx", "delivering", None, Some(1_000)),
            ("dl", "delivering", None, Some(later)),
            ("f", "failed", None, None),
        ];
        let mut rows = Vec::new();
        for (k, (prefix, status, next_retry, lock_until)) in kinds.iter().enumerate() {
            for i in 0..live {
                let created = after + 1_000 + (k as i64) * 100 + i;
                let mut row = RawInsert::pending(
                    app,
                    &format!("{prefix}{i:02}"),
                    &format!("room{}", i % 5),
                    created,
                )
                .with_status(status);
                row.next_retry_at_ms = *next_retry;
                row.lock_until_ms = *lock_until;
                if lock_until.is_some() {
                    row.worker_id = Some("w-old".into());
                }
                rows.push(row);
            }
        }
        rows
    }

    /// Column names and values of this row, in insert order (only the columns that are set).
    fn columns(&self) -> Vec<(&'static str, Bind)> {
        let mut cols = vec![
            ("app_code", Bind::Str(self.app_code.clone())),
            ("event_id", Bind::Str(self.event_id.clone())),
            ("event_type", Bind::Str(self.event_type.clone())),
            ("room_id", Bind::Str(self.room_id.clone())),
            ("status", Bind::Str(self.status.clone())),
            ("envelope", Bind::Bytes(self.envelope.clone())),
            ("created_at_ms", Bind::I64(self.created_at_ms)),
            (
                "updated_at_ms",
                Bind::I64(self.updated_at_ms.unwrap_or(self.created_at_ms)),
            ),
        ];
        if let Some(v) = self.retry_count {
            cols.push(("retry_count", Bind::I64(v)));
        }
        if let Some(v) = &self.last_error {
            cols.push(("last_error", Bind::Str(v.clone())));
        }
        if let Some(v) = &self.worker_id {
            cols.push(("worker_id", Bind::Str(v.clone())));
        }
        if let Some(v) = self.lock_until_ms {
            cols.push(("lock_until_ms", Bind::I64(v)));
        }
        if let Some(v) = self.next_retry_at_ms {
            cols.push(("next_retry_at_ms", Bind::I64(v)));
        }
        cols
    }
}

/// A row's columns as stored, for assertions. An empty `worker_id` (the column's default before
/// the first claim and after a requeue) reads as `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    /// Tenant.
    pub app_code: String,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Room.
    pub room_id: String,
    /// Status column.
    pub status: String,
    /// Envelope bytes.
    pub envelope: Vec<u8>,
    /// Claim order key.
    pub created_at_ms: i64,
    /// Failed attempts.
    pub retry_count: i64,
    /// Last error (NULL → `None`).
    pub last_error: Option<String>,
    /// Lease owner (NULL or `''` → `None`).
    pub worker_id: Option<String>,
    /// Lease end.
    pub lock_until_ms: Option<i64>,
    /// Next retry time.
    pub next_retry_at_ms: Option<i64>,
    /// Last change.
    pub updated_at_ms: i64,
}

impl RawRow {
    /// True when the row carries no lease: `lock_until_ms` is NULL, so no claim's fence matches
    /// it any more (`worker_id` keeps the last claimer, for the record).
    pub fn lease_cleared(&self) -> bool {
        self.lock_until_ms.is_none()
    }
}

impl TestDb {
    /// Placeholder number `n` (1-based) in this backend's syntax.
    pub fn placeholder(&self, n: usize) -> String {
        match self.backend {
            Backend::Postgres => format!("${n}"),
            _ => "?".to_string(),
        }
    }

    /// Runs one statement with binds, returning rows affected.
    pub async fn execute(&self, sql: &str, binds: &[Bind]) -> u64 {
        on_pool!(&self.pool, |pool: DB| bound_query::<DB>(sql, binds)
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .rows_affected())
    }

    /// Runs one statement with binds in a transaction on a connection of its own, then holds the
    /// transaction (and the locks the statement took) open for `hold` and commits: the rows the
    /// statement affected. `ran` is sent once the statement has run (the hold starts then).
    pub async fn run_holding(
        &self,
        sql: &str,
        binds: &[Bind],
        ran: tokio::sync::oneshot::Sender<()>,
        hold: std::time::Duration,
    ) -> u64 {
        on_pool!(&self.pool, |pool: DB| {
            let mut tx = pool.begin().await.expect("begin");
            let affected = bound_query::<DB>(sql, binds)
                .execute(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .rows_affected();
            let _ = ran.send(());
            tokio::time::sleep(hold).await;
            tx.commit().await.expect("commit");
            affected
        })
    }

    /// Runs one query with binds and returns its first column as text, one string per row.
    pub async fn query_strings(&self, sql: &str, binds: &[Bind]) -> Vec<String> {
        on_pool!(&self.pool, |pool: DB| bound_query::<DB>(sql, binds)
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| sqlx::Row::get::<String, _>(row, 0))
            .collect())
    }

    /// Inserts rows into `table` with plain SQL (one multi-row INSERT per call; keep it under a
    /// few thousand rows per call).
    pub async fn insert_raw(&self, table: &str, rows: &[RawInsert]) {
        let mut by_shape: Vec<(Vec<&'static str>, Vec<Vec<Bind>>)> = Vec::new();
        for row in rows {
            let cols = row.columns();
            let names: Vec<&'static str> = cols.iter().map(|(n, _)| *n).collect();
            let values: Vec<Bind> = cols.into_iter().map(|(_, v)| v).collect();
            match by_shape.iter_mut().find(|(n, _)| *n == names) {
                Some((_, vs)) => vs.push(values),
                None => by_shape.push((names, vec![values])),
            }
        }
        for (names, values) in by_shape {
            let mut n = 0;
            let tuples: Vec<String> = values
                .iter()
                .map(|v| {
                    let ph: Vec<String> = v
                        .iter()
                        .map(|_| {
                            n += 1;
                            self.placeholder(n)
                        })
                        .collect();
                    format!("({})", ph.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO {table} ({}) VALUES {}",
                names.join(", "),
                tuples.join(", ")
            );
            let binds: Vec<Bind> = values.into_iter().flatten().collect();
            self.execute(&sql, &binds).await;
        }
    }

    /// The row `(app_code, event_id)` of `room_outbox`, if present.
    pub async fn row(&self, app_code: &str, event_id: &str) -> Option<RawRow> {
        self.row_in(outboxd::store::DEFAULT_TABLE, app_code, event_id)
            .await
    }

    /// The row `(app_code, event_id)` of `table`, if present.
    pub async fn row_in(&self, table: &str, app_code: &str, event_id: &str) -> Option<RawRow> {
        let rows = self
            .rows_where(
                table,
                &format!(
                    "app_code = {} AND event_id = {}",
                    self.placeholder(1),
                    self.placeholder(2)
                ),
                &[Bind::Str(app_code.into()), Bind::Str(event_id.into())],
            )
            .await;
        assert!(
            rows.len() <= 1,
            "primary key (app_code, event_id) not unique"
        );
        rows.into_iter().next()
    }

    /// Every row of `table`, ordered by (app_code, created_at_ms, event_id).
    pub async fn all_rows(&self, table: &str) -> Vec<RawRow> {
        self.rows_where(table, "1 = 1", &[]).await
    }

    /// Rows of `table` matching a raw `WHERE` condition (use [`TestDb::placeholder`] for binds).
    pub async fn rows_where(&self, table: &str, condition: &str, binds: &[Bind]) -> Vec<RawRow> {
        let sql = format!(
            "SELECT app_code, event_id, event_type, room_id, status, envelope, created_at_ms, \
             retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms \
             FROM {table} WHERE {condition} ORDER BY app_code, created_at_ms, event_id"
        );
        on_pool!(&self.pool, |pool: DB| {
            let rows = bound_query::<DB>(&sql, binds)
                .fetch_all(pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            rows.iter()
                .map(|r| RawRow {
                    app_code: get_str::<DB>(r, "app_code").unwrap_or_default(),
                    event_id: get_str::<DB>(r, "event_id").unwrap_or_default(),
                    event_type: get_str::<DB>(r, "event_type").unwrap_or_default(),
                    room_id: get_str::<DB>(r, "room_id").unwrap_or_default(),
                    status: get_str::<DB>(r, "status").unwrap_or_default(),
                    envelope: get_bytes::<DB>(r, "envelope").unwrap_or_default(),
                    created_at_ms: get_i64::<DB>(r, "created_at_ms").expect("created_at_ms"),
                    retry_count: get_i64::<DB>(r, "retry_count").unwrap_or(0),
                    last_error: get_str::<DB>(r, "last_error"),
                    worker_id: get_str::<DB>(r, "worker_id").filter(|w| !w.is_empty()),
                    lock_until_ms: get_i64::<DB>(r, "lock_until_ms"),
                    next_retry_at_ms: get_i64::<DB>(r, "next_retry_at_ms"),
                    updated_at_ms: get_i64::<DB>(r, "updated_at_ms").unwrap_or(0),
                })
                .collect()
        })
    }

    /// Whether `table` exists in this database.
    pub async fn table_exists(&self, table: &str) -> bool {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE 1 = 0");
        on_pool!(&self.pool, |pool: DB| bound_query::<DB>(&sql, &[])
            .fetch_all(pool)
            .await
            .is_ok())
    }

    /// Runs the backend's producer `save` inside a transaction this helper owns, then commits
    /// (`commit = true`) or rolls back. `batches` are saved one after another in that same
    /// transaction; returns each save's result. A failed save still ends the transaction as asked.
    pub async fn save_in_transaction(
        &self,
        table: &str,
        batches: &[Vec<Record>],
        commit: bool,
    ) -> Vec<Result<u64, outboxd::store::StoreError>> {
        let table = TableName::new(table).expect("valid table name");
        let mut results = Vec::new();
        macro_rules! in_tx {
            ($pool:expr, $save:path) => {{
                let mut tx = $pool.begin().await.expect("begin");
                for batch in batches {
                    results.push($save(&mut tx, &table, batch).await);
                }
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
            }};
        }
        match &self.pool {
            RawPool::Sqlite(p) => in_tx!(p, outboxd::store::sqlite::save),
            RawPool::MySql(p) => in_tx!(p, outboxd::store::mysql::save),
            RawPool::Postgres(p) => in_tx!(p, outboxd::store::postgres::save),
        }
        results
    }
}

/// Column `col` as an integer, whatever integer type the database returns it as (NULL or
/// absent → `None`).
pub(super) fn get_i64<'r, DB>(row: &'r DB::Row, col: &str) -> Option<i64>
where
    DB: sqlx::Database,
    usize: sqlx::ColumnIndex<DB::Row>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i32: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i16: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    if let Ok(v) = row.try_get::<Option<i64>, _>(col) {
        return v;
    }
    if let Ok(v) = row.try_get::<Option<i32>, _>(col) {
        return v.map(i64::from);
    }
    if let Ok(v) = row.try_get::<Option<i16>, _>(col) {
        return v.map(i64::from);
    }
    try_unsigned::<DB>(row, col)
}

/// Column `col` of a MySQL row as an integer when it is unsigned (`None` for other databases).
fn try_unsigned<DB: sqlx::Database>(row: &DB::Row, col: &str) -> Option<i64>
where
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
{
    // MySQL unsigned columns: decode through the MySQL row type when that is what we have.
    let any: &dyn std::any::Any = row;
    if let Some(r) = any.downcast_ref::<sqlx::mysql::MySqlRow>() {
        if let Ok(v) = r.try_get::<Option<u64>, _>(col) {
            return v.map(|v| v as i64);
        }
        if let Ok(v) = r.try_get::<Option<u32>, _>(col) {
            return v.map(i64::from);
        }
        if let Ok(v) = r.try_get::<Option<u16>, _>(col) {
            return v.map(i64::from);
        }
        if let Ok(v) = r.try_get::<Option<u8>, _>(col) {
            return v.map(i64::from);
        }
        if let Ok(v) = r.try_get::<Option<i8>, _>(col) {
            return v.map(i64::from);
        }
    }
    None
}

/// Column `col` as text, also when the database returns it as bytes (NULL or absent → `None`).
pub(super) fn get_str<'r, DB>(row: &'r DB::Row, col: &str) -> Option<String>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    String: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    Vec<u8>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    if let Ok(v) = row.try_get::<Option<String>, _>(col) {
        return v;
    }
    row.try_get::<Option<Vec<u8>>, _>(col)
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Column `col` as bytes (NULL or absent → `None`).
pub(super) fn get_bytes<'r, DB>(row: &'r DB::Row, col: &str) -> Option<Vec<u8>>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    Vec<u8>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    row.try_get::<Option<Vec<u8>>, _>(col).ok().flatten()
}
