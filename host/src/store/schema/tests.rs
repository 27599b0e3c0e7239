//! Unit tests of the schema: the required index's plan, the DDL per backend, migration
//! bookkeeping.

use super::*;
use crate::store::DEFAULT_TABLE;
use crate::store::statement::STATUS_INDEX;
use crate::store::statement::insert::OUTBOX_COLUMNS;

const DIALECTS: [Backend; 3] = [Backend::Sqlite, Backend::MySql, Backend::Postgres];

fn table() -> TableName {
    TableName::new(DEFAULT_TABLE).unwrap()
}

#[test]
fn required_indexes_are_created_by_the_migrations_and_0001_has_every_column() {
    for backend in DIALECTS {
        let all: String = migrations(backend)
            .iter()
            .map(|m| m.sql(&table()))
            .collect();
        for index in backend.dialect().required_indexes() {
            let name = index.name(&table());
            let columns = format!("({})", index.columns.join(", "));
            // Built under its name, or under one renamed to it once built.
            let renamed_to = format!(" RENAME TO {name};");
            let built_as: Vec<String> = all
                .lines()
                .filter_map(|line| line.strip_suffix(&renamed_to))
                .filter_map(|line| line.rsplit(' ').next())
                .map(|built| format!("{built} "))
                .chain([format!("{name} ")])
                .collect();
            assert!(
                all.lines().any(|line| line.contains("CREATE INDEX")
                    && line.contains(&columns)
                    && built_as.iter().any(|built| line.contains(built.as_str()))),
                "{backend:?}: {name} {columns}"
            );
        }
        let sql = migrations(backend)[0].sql(&table());
        for column in OUTBOX_COLUMNS {
            assert!(
                sql.contains(&format!("\n    {column} ")),
                "{backend:?}: {column}"
            );
        }
    }
}

#[test]
fn mariadb_keeps_failed_rows_apart_instead_of_a_status_index() {
    let last = migrations(Backend::MySql).last().unwrap();
    assert_eq!(last.name, "0007_failed_apart");
    let sql = last.sql(&table());
    assert!(sql.contains("ADD COLUMN outbox_failed TINYINT AS (status = ''failed'') VIRTUAL"));
    assert!(sql.contains("DROP INDEX idx_room_outbox_pending, ALGORITHM=INPLACE, LOCK=NONE"));
    assert_eq!(
        required_indexes(Backend::MySql, &table()),
        [(
            "idx_room_outbox_failed".to_string(),
            vec!["app_code", "outbox_failed", "created_at_ms", "event_id"]
        )]
    );
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let [(_, columns)] = &required_indexes(backend, &table())[..] else {
            panic!("{backend:?}: one required index");
        };
        assert_eq!(
            columns,
            &["app_code", "status", "created_at_ms", "event_id"]
        );
    }
}

#[test]
fn postgres_keeps_only_finished_rows_in_its_status_index() {
    let last = migrations(Backend::Postgres).last().unwrap();
    assert_eq!(last.name, "0010_history_index");
    let sql = last.sql(&table());
    assert!(sql.contains("WHERE status IN ('delivered', 'failed');"));
    assert!(sql.contains("RENAME TO idx_room_outbox_history;"));
    assert!(sql.ends_with("DROP INDEX CONCURRENTLY IF EXISTS idx_room_outbox_pending;\n"));
    assert_eq!(
        required_indexes(Backend::Postgres, &table())[0].0,
        "idx_room_outbox_history"
    );
    let [history] = Backend::Postgres.dialect().required_indexes() else {
        panic!("one required index");
    };
    assert_eq!(
        create_index(&table(), history),
        "CREATE INDEX idx_room_outbox_history ON room_outbox \
         (app_code, status, created_at_ms, event_id) WHERE status IN ('delivered', 'failed')"
    );
}

#[test]
fn required_index_plan() {
    let index = |name: &str, columns: &[&str]| CatalogIndex {
        name: name.to_string(),
        columns: columns.iter().map(|c| Some(c.to_string())).collect(),
        partial: false,
    };
    // The Go service's indexes: its claim index covers the status index under another name.
    let go = [
        index("PRIMARY", &["app_code", "event_id"]),
        index(
            "idx_room_outbox_claim",
            &["APP_CODE", "status", "created_at_ms", "event_id"],
        ),
    ];
    assert!(
        missing_indexes(Backend::MySql, &table(), &go, &STATUS_INDEX)
            .unwrap()
            .is_empty()
    );
    let create = missing_indexes(Backend::MySql, &table(), &go[..1], &STATUS_INDEX).unwrap();
    assert_eq!(create.len(), 1);
    // A partial index of the columns under another name may leave out rows the status index
    // must hold: it is created beside it. Under the wanted name, it is taken as outboxd's own.
    let failed_only = CatalogIndex {
        partial: true,
        ..go[1].clone()
    };
    let beside = [go[0].clone(), failed_only.clone()];
    assert_eq!(
        missing_indexes(Backend::Sqlite, &table(), &beside, &STATUS_INDEX)
            .unwrap()
            .len(),
        1
    );
    let own = [CatalogIndex {
        name: "idx_room_outbox_pending".into(),
        ..failed_only
    }];
    assert!(
        missing_indexes(Backend::Sqlite, &table(), &own, &STATUS_INDEX)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        create_index(&table(), create[0]),
        "CREATE INDEX idx_room_outbox_pending ON room_outbox (app_code, status, created_at_ms, event_id)"
    );
    let conflict = [index(
        "idx_room_outbox_pending",
        &["app_code", "status", "next_retry_at_ms"],
    )];
    let err = missing_indexes(Backend::MySql, &table(), &conflict, &STATUS_INDEX).unwrap_err();
    assert_eq!(
        err,
        "index idx_room_outbox_pending on room_outbox has columns (app_code, status, next_retry_at_ms) \
             but outboxd needs (app_code, status, created_at_ms, event_id): drop it \
             (DROP INDEX idx_room_outbox_pending ON room_outbox) and run `outboxd migrate` again"
    );
}

#[test]
fn a_migration_drops_the_per_row_claims_indexes() {
    for backend in DIALECTS {
        let retire = migrations(backend)
            .iter()
            .find(|m| m.name.ends_with("_retire_claim_indexes"))
            .unwrap_or_else(|| panic!("{backend:?}: no migration retires the claim indexes"));
        let sql = retire.sql(&table());
        for suffix in ["retry", "lease", "room"] {
            assert!(
                sql.contains(&format!("idx_room_outbox_{suffix}")) && sql.contains("DROP INDEX"),
                "{backend:?}: {suffix}"
            );
        }
    }
}

#[test]
fn migrations_render_the_table_name() {
    let custom = TableName::new("orders_outbox").unwrap();
    for backend in DIALECTS {
        let all = migrations(backend);
        let first = all[0].sql(&custom);
        assert!(first.contains("CREATE TABLE IF NOT EXISTS orders_outbox"));
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

#[test]
fn migrations_outside_a_transaction_come_last_and_split_into_statements() {
    for backend in DIALECTS {
        let all = migrations(backend);
        let first_outside = all.iter().position(|m| m.outside_transaction);
        if let Some(first) = first_outside {
            // `migrate` runs them after the transaction of the others: listed last, they keep
            // version order.
            assert!(
                all[first..].iter().all(|m| m.outside_transaction),
                "{backend:?}: a transactional migration after an outside one"
            );
            assert!(
                backend.dialect().migration_session_lock().is_some(),
                "{backend:?}: no session lock for them"
            );
        }
    }
    let outside: Vec<_> = migrations(Backend::Postgres)
        .iter()
        .filter(|m| m.outside_transaction)
        .collect();
    assert_eq!(outside.len(), 5);
    let history = outside[4].statements(&table());
    assert_eq!(history.len(), 5, "{history:#?}");
    assert!(history[1].starts_with("CREATE INDEX CONCURRENTLY idx_room_outbox_hist_new ON"));
    let statements = outside[0].statements(&table());
    assert_eq!(statements.len(), 8, "{statements:#?}");
    let partitions = outside[1].statements(&table());
    assert_eq!(partitions.len(), 6, "{partitions:#?}");
    assert!(partitions[3].starts_with("CREATE INDEX CONCURRENTLY idx_room_outbox_part_new"));
    assert_eq!(
        statements[0],
        "DROP INDEX CONCURRENTLY IF EXISTS idx_room_outbox_retry_new"
    );
    assert_eq!(
        statements[1],
        "CREATE INDEX CONCURRENTLY idx_room_outbox_retry_new ON room_outbox \
         (app_code, status, next_retry_at_ms, created_at_ms, event_id)\n    \
         WHERE status = 'retryable' AND next_retry_at_ms IS NOT NULL"
    );
    assert!(
        statements
            .iter()
            .all(|s| !s.contains("--") && !s.ends_with(';'))
    );
}
