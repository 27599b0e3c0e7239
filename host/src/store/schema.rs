//! The outbox table's schema: the embedded migrations, the columns and claim indexes outboxd
//! needs, and `migrate` itself (apply what is missing, then check and complete an adopted table).
//!
//! What differs per database (the migration files, the bookkeeping DDL, catalog queries, the
//! migration lock) comes from the backend's `SqlDialect`.

use std::collections::HashSet;

use super::exec::{Driver, Session, begin_write, db};
use super::room_index::ROOM_INDEX;
use super::row::{IndexColumn, Int, Name};
use super::statement::{Arg, Bound, SqlBuilder};
use super::{Backend, MigrateOptions, StoreError, TableName};
use crate::record;

/// One embedded schema migration (`migrations/<backend>/NNNN_name.sql`), written with the
/// placeholder `{{table}}` for the outbox table.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version recorded in `outboxd_migrations`.
    pub version: i64,
    /// File name without `.sql`.
    pub name: &'static str,
    template: &'static str,
    /// Whether the migration only drops the room index (taking it out of the base schema): it
    /// is skipped, and recorded as applied all the same, when `migrate` runs with the room index
    /// ([`MigrateOptions::room_index`]), so a per-room table keeps its index instead of dropping
    /// and rebuilding it.
    pub drops_room_index: bool,
}

impl Migration {
    /// Migration `version` named `name` (the file name without `.sql`), its SQL `template`
    /// naming the outbox table `{{table}}`.
    pub(crate) const fn new(version: i64, name: &'static str, template: &'static str) -> Migration {
        Migration {
            version,
            name,
            template,
            drops_room_index: false,
        }
    }

    /// This migration, marked as one that only drops the room index
    /// ([`Migration::drops_room_index`]).
    pub(crate) const fn dropping_room_index(self) -> Migration {
        Migration {
            drops_room_index: true,
            ..self
        }
    }

    /// Whether `migrate` with `options` runs this migration's SQL; otherwise it only records it.
    pub fn runs_with(&self, options: &MigrateOptions) -> bool {
        !(self.drops_room_index && options.room_index)
    }

    /// The migration's SQL for `table`.
    pub fn sql(&self, table: &TableName) -> String {
        self.template.replace("{{table}}", table.as_str())
    }
}

/// Creates the bookkeeping table `outboxd_migrations(table_name, version, applied_at_ms)`: one
/// row per outbox table and migration applied (the backend may append table options).
const CREATE_BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS outboxd_migrations (\
     table_name VARCHAR(64) NOT NULL, version BIGINT NOT NULL, applied_at_ms BIGINT NOT NULL, \
     PRIMARY KEY (table_name, version))";

/// The embedded migrations of `backend`, oldest first.
pub fn migrations(backend: Backend) -> &'static [Migration] {
    backend.dialect().migrations()
}

/// Versions already applied to `table`.
pub(crate) fn applied_versions(backend: Backend, table: &TableName) -> Bound {
    let mut b = SqlBuilder::new(backend);
    b.push("SELECT version FROM outboxd_migrations WHERE table_name = ")
        .bind(table.as_str());
    b.finish()
}

/// Records a migration as applied to `table`.
pub(crate) fn record_version(
    backend: Backend,
    table: &TableName,
    version: i64,
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(backend);
    b.push("INSERT INTO outboxd_migrations (table_name, version, applied_at_ms) VALUES ")
        .bind_list([
            Arg::from(table.as_str()),
            Arg::Int(version),
            Arg::Int(now_ms),
        ])
        .push(backend.dialect().ignore_duplicate_version());
    b.finish()
}

/// Every column of the outbox table (migration 0001), in table order: the outbox INSERT lists them
/// in this order and `migrate` checks that the table has them all.
pub(crate) const OUTBOX_COLUMNS: [&str; 13] = [
    "app_code",
    "event_id",
    "event_type",
    "room_id",
    "status",
    "envelope",
    "created_at_ms",
    "retry_count",
    "last_error",
    "worker_id",
    "lock_until_ms",
    "next_retry_at_ms",
    "updated_at_ms",
];

/// One index the claims need (migration 0001's `idx_<table>_<suffix>`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimIndex {
    /// The name is `idx_<table>_<suffix>`.
    pub(crate) suffix: &'static str,
    /// Key columns, in order.
    pub(crate) columns: &'static [&'static str],
    /// Whether `migrate` creates it over live rows only where the database's claims use such a
    /// partial index (`SqlDialect::live_rows_predicate`).
    pub(crate) live_rows_only: bool,
    /// Whether the claims' statements name it on databases whose dialect hints the index
    /// (`SqlDialect::room_probe_index_hint`): there it must exist under its own name.
    pub(crate) named_in_claims: bool,
}

impl ClaimIndex {
    /// The index name for `table` (at most 60 bytes: table names have at most 48).
    pub(crate) fn name(&self, table: &TableName) -> String {
        format!("idx_{}_{}", table.as_str(), self.suffix)
    }

    /// Whether `backend`'s claims name this index, so that only an index of that exact name (and
    /// columns) serves them; otherwise any index with its columns does.
    pub(crate) fn needs_own_name(&self, backend: Backend, table: &TableName) -> bool {
        self.named_in_claims
            && backend
                .dialect()
                .room_probe_index_hint(&self.name(table))
                .is_some()
    }
}

/// The claim indexes of migration 0001 that every claim reads; `migrate` checks (and creates)
/// them on every run, so an adopted table gets them too. The room index, which only per-room
/// claims read, is not among them ([`ROOM_INDEX`]).
pub(crate) static CLAIM_INDEXES: [ClaimIndex; 3] = [
    ClaimIndex {
        suffix: "pending",
        columns: &["app_code", "status", "created_at_ms", "event_id"],
        live_rows_only: false,
        named_in_claims: false,
    },
    ClaimIndex {
        suffix: "retry",
        columns: &[
            "app_code",
            "status",
            "next_retry_at_ms",
            "created_at_ms",
            "event_id",
        ],
        live_rows_only: false,
        named_in_claims: false,
    },
    ClaimIndex {
        suffix: "lease",
        columns: &[
            "app_code",
            "status",
            "lock_until_ms",
            "created_at_ms",
            "event_id",
        ],
        live_rows_only: false,
        named_in_claims: false,
    },
];

/// The catalog query `migrate` reads a table's indexes with, for tools and tests that read them
/// on their own connection: the statement (one row per key column, `index name, column name`,
/// the column NULL for an expression, ordered by index and position) and the one value to bind to
/// its placeholder, `table`'s name as the catalog stores it.
pub fn index_columns_query(backend: Backend, table: &TableName) -> (String, String) {
    let Bound { sql, args } = backend.dialect().table_index_columns(table);
    let [Arg::Text(catalog_name)] = args.as_slice() else {
        unreachable!("the catalog query binds the table name only: {args:?}")
    };
    (sql.to_string(), catalog_name.clone())
}

/// `CREATE INDEX` of a claim index on `table` (static columns, name from the validated table),
/// over live rows only where `index.live_rows_only` and the database has such a predicate.
pub(crate) fn create_claim_index(
    backend: Backend,
    table: &TableName,
    index: &ClaimIndex,
) -> String {
    let mut sql = format!(
        "CREATE INDEX {} ON {} ({})",
        index.name(table),
        table.as_str(),
        index.columns.join(", ")
    );
    if let Some(predicate) = backend.dialect().live_rows_predicate()
        && index.live_rows_only
    {
        sql.push_str(" WHERE ");
        sql.push_str(predicate);
    }
    sql
}

/// A table's indexes as the catalog lists them: name and key columns in order (`None` for an
/// expression).
pub(crate) type TableIndexes = Vec<(String, Vec<Option<String>>)>;

/// Reads the indexes of `table` ([`TableIndexes`]) with the backend's catalog query.
pub(crate) async fn table_indexes<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
    op: &'static str,
) -> Result<TableIndexes, StoreError> {
    let mut indexes: TableIndexes = Vec::new();
    let rows = session
        .rows::<IndexColumn>(backend.dialect().table_index_columns(table))
        .await
        .map_err(db(op))?;
    for IndexColumn { index, column } in rows {
        match indexes.last_mut() {
            Some((name, columns)) if *name == index => columns.push(column),
            _ => indexes.push((index, vec![column])),
        }
    }
    Ok(indexes)
}

/// Whether some index of `existing` has exactly `index`'s key columns: under any name, or under
/// `index`'s own name where `backend`'s claims name it ([`ClaimIndex::needs_own_name`]).
pub(crate) fn has_index_columns(
    backend: Backend,
    table: &TableName,
    existing: &[(String, Vec<Option<String>>)],
    index: &ClaimIndex,
) -> bool {
    let own_name = index
        .needs_own_name(backend, table)
        .then(|| index.name(table));
    existing.iter().any(|(name, columns)| {
        own_name
            .as_deref()
            .is_none_or(|own| name.eq_ignore_ascii_case(own))
            && same_columns(columns, index)
    })
}

/// Whether `columns` (an index's key columns, `None` for an expression) are exactly `index`'s.
pub(crate) fn same_columns(columns: &[Option<String>], index: &ClaimIndex) -> bool {
    columns.len() == index.columns.len()
        && columns.iter().zip(index.columns).all(|(column, wanted)| {
            column
                .as_deref()
                .is_some_and(|c| c.eq_ignore_ascii_case(wanted))
        })
}

/// What `migrate` must do about the `wanted` claim indexes of a table, given its indexes (name
/// and key columns, `None` for an expression): the indexes to create, or why it cannot.
pub(crate) fn plan_claim_indexes(
    backend: Backend,
    table: &TableName,
    existing: &[(String, Vec<Option<String>>)],
    wanted: &[&'static ClaimIndex],
) -> Result<Vec<&'static ClaimIndex>, String> {
    let mut create = Vec::new();
    let mut conflicts = Vec::new();
    for &index in wanted {
        if has_index_columns(backend, table, existing, index) {
            continue;
        }
        let name = index.name(table);
        match existing
            .iter()
            .find(|(existing, _)| existing.eq_ignore_ascii_case(&name))
        {
            Some((existing, columns)) => {
                let columns: Vec<&str> = columns
                    .iter()
                    .map(|c| c.as_deref().unwrap_or("<expression>"))
                    .collect();
                conflicts.push(format!(
                    "index {existing} on {table} has columns ({}) but outboxd needs ({}): \
                     drop it ({})",
                    columns.join(", "),
                    index.columns.join(", "),
                    backend.dialect().drop_index_hint(table, existing),
                    table = table.as_str(),
                ));
            }
            None => create.push(index),
        }
    }
    if conflicts.is_empty() {
        Ok(create)
    } else {
        Err(format!(
            "{} and run `outboxd migrate` again",
            conflicts.join("; ")
        ))
    }
}

/// Applies the embedded migrations not yet recorded for the table, in one write transaction
/// (MySQL/MariaDB commit DDL implicitly: there every step is idempotent instead); with the room
/// index, the migration dropping it is recorded without running ([`Migration::runs_with`]).
/// Then checks the table's columns and claim indexes on every run ([`verify_outbox_table`]), so
/// a table adopted from another program gets the indexes the claims need, and the room index
/// when `options` asks for it.
pub(crate) async fn migrate<D: Driver>(
    driver: &D,
    options: &MigrateOptions,
) -> Result<Vec<i64>, StoreError> {
    const OP: &str = "migrate";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let mut tx = begin_write(driver, OP).await?;
    if let Some(lock) = backend.dialect().migration_lock() {
        tx.run(Bound {
            sql: lock.into(),
            args: Vec::new(),
        })
        .await
        .map_err(db(OP))?;
    }
    // A table created by another program must have every column before migration 0001's
    // indexes can be created on it.
    has_outbox_columns(&mut *tx, backend, table).await?;
    tx.script(format!(
        "{CREATE_BOOKKEEPING}{}",
        backend.dialect().bookkeeping_table_options()
    ))
    .await
    .map_err(db(OP))?;
    let applied: HashSet<i64> = tx
        .rows::<Int>(applied_versions(backend, table))
        .await
        .map_err(db(OP))?
        .into_iter()
        .map(|Int(version)| version)
        .collect();
    let mut applied_now = Vec::new();
    for migration in backend.dialect().migrations() {
        if applied.contains(&migration.version) {
            continue;
        }
        if migration.runs_with(options) {
            tx.script(migration.sql(table))
                .await
                .map_err(|source| StoreError::Migration {
                    version: migration.version,
                    name: migration.name,
                    source,
                })?;
        } else {
            tracing::info!(
                table = table.as_str(),
                version = migration.version,
                name = migration.name,
                "keeping the room index that per-room ordering reads: migration recorded, not run"
            );
        }
        applied_now.push(migration.version);
    }
    // Before recording: on MySQL/MariaDB the DDL above already committed, and a table refused
    // here must not count as migrated.
    verify_outbox_table(&mut *tx, backend, table, options).await?;
    for version in &applied_now {
        tx.run(record_version(backend, table, *version, record::now_ms()))
            .await
            .map_err(db(OP))?;
    }
    tx.commit().await.map_err(db(OP))?;
    Ok(applied_now)
}

/// Whether the outbox table exists; an error naming the missing columns when it exists without
/// every column of [`OUTBOX_COLUMNS`].
async fn has_outbox_columns<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
) -> Result<bool, StoreError> {
    let columns: Vec<String> = session
        .rows::<Name>(backend.dialect().table_columns(table))
        .await
        .map_err(db("migrate"))?
        .into_iter()
        .map(|Name(column)| column)
        .collect();
    if columns.is_empty() {
        return Ok(false);
    }
    let missing: Vec<&str> = OUTBOX_COLUMNS
        .iter()
        .copied()
        .filter(|wanted| !columns.iter().any(|c| c.eq_ignore_ascii_case(wanted)))
        .collect();
    if missing.is_empty() {
        Ok(true)
    } else {
        Err(StoreError::Schema(format!(
            "table {} lacks the column(s) {} that outboxd needs: add them as in \
             migrations/<backend>/0001_room_outbox.sql and run `outboxd migrate` again",
            table.as_str(),
            missing.join(", ")
        )))
    }
}

/// Checks the outbox table after the migrations: every column of the record present
/// ([`has_outbox_columns`]), and the claim indexes of migration 0001 present under any name (with
/// `options.room_index`, the room index too). A table created by another program (`CREATE TABLE
/// IF NOT EXISTS` left it as it was) gets the missing claim indexes; one with an index named like
/// a wanted index but of other columns is refused, and nothing is created.
async fn verify_outbox_table<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
    options: &MigrateOptions,
) -> Result<(), StoreError> {
    const OP: &str = "migrate";
    if !has_outbox_columns(session, backend, table).await? {
        return Err(StoreError::Schema(format!(
            "table {table} does not exist, but outboxd_migrations records it as migrated: \
             delete its rows there (DELETE FROM outboxd_migrations WHERE table_name = '{table}') \
             and run `outboxd migrate` again",
            table = table.as_str()
        )));
    }
    let indexes = table_indexes(session, backend, table, OP).await?;
    let mut wanted: Vec<&'static ClaimIndex> = CLAIM_INDEXES.iter().collect();
    if options.room_index {
        wanted.push(&ROOM_INDEX);
    }
    let create =
        plan_claim_indexes(backend, table, &indexes, &wanted).map_err(StoreError::Schema)?;
    for index in create {
        tracing::info!(
            table = table.as_str(),
            index = %index.name(table),
            columns = %index.columns.join(", "),
            "creating a missing claim index on the outbox table"
        );
        session
            .script(create_claim_index(backend, table, index))
            .await
            .map_err(db(OP))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DEFAULT_TABLE;

    const DIALECTS: [Backend; 3] = [Backend::Sqlite, Backend::MySql, Backend::Postgres];

    fn table() -> TableName {
        TableName::new(DEFAULT_TABLE).unwrap()
    }

    #[test]
    fn claim_indexes_match_migration_0001() {
        for backend in DIALECTS {
            let sql = migrations(backend)[0].sql(&table());
            for index in CLAIM_INDEXES.iter().chain([&ROOM_INDEX]) {
                let name = index.name(&table());
                let columns = format!("({})", index.columns.join(", "));
                assert!(
                    sql.lines().any(|line| line.contains(&format!("{name} "))
                        && line
                            .trim_end()
                            .trim_end_matches(',')
                            .trim_end_matches(';')
                            .ends_with(&columns)),
                    "{backend:?}: {name} {columns}"
                );
            }
            for column in OUTBOX_COLUMNS {
                assert!(
                    sql.contains(&format!("\n    {column} ")),
                    "{backend:?}: {column}"
                );
            }
        }
    }

    #[test]
    fn claim_index_plan() {
        let index = |name: &str, columns: &[&str]| {
            (
                name.to_string(),
                columns
                    .iter()
                    .map(|c| Some(c.to_string()))
                    .collect::<Vec<_>>(),
            )
        };
        // The Go service's indexes: its claim index covers the pending branch under another name.
        let go = [
            index("PRIMARY", &["app_code", "event_id"]),
            index(
                "idx_room_outbox_claim",
                &["APP_CODE", "status", "created_at_ms", "event_id"],
            ),
        ];
        let base: Vec<&ClaimIndex> = CLAIM_INDEXES.iter().collect();
        let create = plan_claim_indexes(Backend::MySql, &table(), &go, &base).unwrap();
        let names: Vec<String> = create.iter().map(|i| i.name(&table())).collect();
        assert_eq!(names, ["idx_room_outbox_retry", "idx_room_outbox_lease"]);
        let with_room = [&CLAIM_INDEXES[0], &ROOM_INDEX];
        let create = plan_claim_indexes(Backend::MySql, &table(), &go, &with_room).unwrap();
        let names: Vec<String> = create.iter().map(|i| i.name(&table())).collect();
        assert_eq!(names, ["idx_room_outbox_room"]);
        assert_eq!(
            create_claim_index(Backend::MySql, &table(), create[0]),
            "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, room_id, status, created_at_ms, event_id)"
        );
        assert_eq!(
            create_claim_index(Backend::Postgres, &table(), create[0]),
            "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, room_id, status, created_at_ms, event_id)"
        );
        assert_eq!(
            create_claim_index(Backend::Sqlite, &table(), create[0]),
            "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, room_id, status, created_at_ms, event_id) \
             WHERE status = 'pending' OR status = 'retryable' OR status = 'delivering'"
        );
        assert_eq!(
            create_claim_index(Backend::Sqlite, &table(), &CLAIM_INDEXES[1]),
            "CREATE INDEX idx_room_outbox_retry ON room_outbox (app_code, status, next_retry_at_ms, created_at_ms, event_id)",
            "unchanged: only the room index is created partial"
        );
        let conflict = [
            index(
                "idx_room_outbox_pending",
                &["app_code", "status", "next_retry_at_ms"],
            ),
            (
                "idx_room_outbox_room".to_string(),
                vec![Some("app_code".to_string()), None],
            ),
        ];
        assert_eq!(
            plan_claim_indexes(Backend::MySql, &table(), &conflict[1..], &base)
                .unwrap()
                .len(),
            3,
            "a same-named room index of other columns is no concern without the room index"
        );
        let wanted = [
            &CLAIM_INDEXES[0],
            &CLAIM_INDEXES[1],
            &CLAIM_INDEXES[2],
            &ROOM_INDEX,
        ];
        let err = plan_claim_indexes(Backend::MySql, &table(), &conflict, &wanted).unwrap_err();
        assert_eq!(
            err,
            "index idx_room_outbox_pending on room_outbox has columns (app_code, status, next_retry_at_ms) \
                 but outboxd needs (app_code, status, created_at_ms, event_id): drop it \
                 (DROP INDEX idx_room_outbox_pending ON room_outbox); index idx_room_outbox_room on room_outbox \
                 has columns (app_code, <expression>) but outboxd needs (app_code, room_id, status, created_at_ms, \
                 event_id): drop it (DROP INDEX idx_room_outbox_room ON room_outbox) and run `outboxd migrate` again"
        );
        let complete: Vec<_> = wanted.iter().map(|i| index("other", i.columns)).collect();
        assert!(
            plan_claim_indexes(Backend::Postgres, &table(), &complete, &wanted)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn room_index_is_created_as_sqlite_0002_made_it_and_dropped_by_one_marked_migration() {
        let sqlite_0002 = migrations(Backend::Sqlite)[1].sql(&table());
        let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let created = create_claim_index(Backend::Sqlite, &table(), &ROOM_INDEX);
        assert!(words(&sqlite_0002).contains(&created), "{created}");
        for backend in DIALECTS {
            let drops: Vec<_> = migrations(backend)
                .iter()
                .filter(|m| m.drops_room_index)
                .collect();
            assert_eq!(
                drops.len(),
                1,
                "{backend:?}: only the drop is skipped with the room index"
            );
            let drop = drops[0];
            let sql = drop.sql(&table());
            assert!(
                sql.contains("DROP INDEX") && sql.contains("idx_room_outbox_room"),
                "{backend:?}: {sql}"
            );
            // No other migration touches the room index.
            for other in migrations(backend).iter().filter(|m| !m.drops_room_index) {
                assert!(
                    other.version < drop.version || !other.sql(&table()).contains("_room "),
                    "{backend:?}: migration {} after the drop touches the room index",
                    other.version
                );
            }
            assert!(drop.runs_with(&MigrateOptions::default()));
            assert!(!drop.runs_with(&MigrateOptions { room_index: true }));
        }
    }

    #[test]
    fn migrations_render_the_table_name() {
        let custom = TableName::new("orders_outbox").unwrap();
        for backend in DIALECTS {
            let all = migrations(backend);
            assert_eq!(all.first().map(|m| m.version), Some(1));
            let first = all[0].sql(&custom);
            assert!(first.contains("CREATE TABLE IF NOT EXISTS orders_outbox"));
            assert!(first.contains("idx_orders_outbox_room"));
            for migration in all {
                let sql = migration.sql(&custom);
                assert!(!sql.contains("{{"), "{}", migration.name);
                assert!(sql.contains("orders_outbox"), "{}", migration.name);
            }
            let versions: Vec<i64> = all.iter().map(|m| m.version).collect();
            let expected: Vec<i64> = (1..=all.len() as i64).collect();
            assert_eq!(versions, expected, "{backend:?}: versions 1, 2, … in order");
        }
        let record = record_version(Backend::Postgres, &table(), 1, 2);
        assert!(
            record
                .sql
                .ends_with("VALUES ($1, $2, $3) ON CONFLICT (table_name, version) DO NOTHING")
        );
    }
}
