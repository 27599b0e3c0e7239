//! Unit tests of the schema: claim index plans, the DDL per backend, migration bookkeeping.

use super::*;
use crate::store::claim_index::CLAIM_INDEXES;
use crate::store::statement::insert::OUTBOX_COLUMNS;
use crate::store::{DEFAULT_TABLE, MigrateOptions};

const DIALECTS: [Backend; 3] = [Backend::Sqlite, Backend::MySql, Backend::Postgres];

fn table() -> TableName {
    TableName::new(DEFAULT_TABLE).unwrap()
}

#[test]
fn claim_indexes_match_migration_0001() {
    for backend in DIALECTS {
        let sql = migrations(backend)[0].sql(&table());
        // The room index too, of the columns `migrate` checks: a fresh per-room table is not
        // rebuilt (tables of earlier versions have `ROOM_INDEX.former_columns`).
        for index in claim_indexes(backend).iter().chain([&ROOM_INDEX]) {
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
    let names: Vec<String> = create.iter().map(|c| c.index().name(&table())).collect();
    assert_eq!(names, ["idx_room_outbox_retry", "idx_room_outbox_lease"]);
    let with_room = [&CLAIM_INDEXES[0], &ROOM_INDEX];
    let create = plan_claim_indexes(Backend::MySql, &table(), &go, &with_room).unwrap();
    let names: Vec<String> = create.iter().map(|c| c.index().name(&table())).collect();
    assert_eq!(names, ["idx_room_outbox_room"]);
    assert_eq!(
        create_claim_index(Backend::MySql, &table(), create[0].index()),
        "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, status, room_id, created_at_ms, event_id)"
    );
    assert_eq!(
        create_claim_index(Backend::Postgres, &table(), create[0].index()),
        "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, status, room_id, created_at_ms, event_id)"
    );
    assert_eq!(
        create_claim_index(Backend::Sqlite, &table(), create[0].index()),
        "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, status, room_id, created_at_ms, event_id) \
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
             has columns (app_code, <expression>) but outboxd needs (app_code, status, room_id, created_at_ms, \
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
fn room_index_is_created_as_sqlite_0002_makes_it_and_dropped_by_one_marked_migration() {
    let sqlite_0002 = migrations(Backend::Sqlite)[1].sql(&table());
    let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
    // `migrate` creates the room index as 0002 does: the same columns, over the same live rows.
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
    assert_eq!(outside.len(), 2);
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

#[test]
fn postgres_creates_missing_retry_and_lease_indexes_as_migration_0006_builds_them() {
    let m0006 = migrations(Backend::Postgres)
        .iter()
        .find(|m| m.version == 6)
        .unwrap()
        .sql(&table());
    let words = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
    for index in &claim_indexes(Backend::Postgres)[1..] {
        let created = create_claim_index(Backend::Postgres, &table(), index);
        let (head, predicate) = created.split_once(" WHERE ").expect("partial");
        // 0006 builds it under a temporary name, CONCURRENTLY, and renames it.
        let concurrent = head.replace(
            "CREATE INDEX idx_room_outbox_",
            "CREATE INDEX CONCURRENTLY idx_room_outbox_",
        );
        let (name, columns) = concurrent.split_once(" ON ").unwrap();
        assert!(
            words(&m0006).contains(&format!("{name}_new ON {columns} WHERE {predicate}")),
            "{created}"
        );
    }
    assert!(
        !create_claim_index(
            Backend::Postgres,
            &table(),
            &claim_indexes(Backend::Postgres)[0]
        )
        .contains("WHERE"),
        "the pending index holds every row"
    );
}
