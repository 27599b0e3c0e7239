//! `migrate`: creating the outbox table, its indexes and the partition tables, table names, and
//! adopting (or refusing) a table another program created.

use std::sync::Arc;

use outboxd::store::{Backend, DEFAULT_TABLE, OutboxStore, StoreError, TableName};

use crate::conformance::helpers::{
    APP, HOST, delivered, enqueue, ids, mark, own_all, read_all, read_app, status_of, strs,
};
use crate::support::{Bind, RawInsert, TestDb, record};

crate::support::per_backend!(
    migrate_is_idempotent,
    migrate_rejects_invalid_table_names,
    migrate_custom_table_names_work,
    migrate_adopts_a_foreign_table,
    migrate_refuses_a_status_index_name_with_other_columns,
    migrate_refuses_a_table_missing_columns,
    migrate_upgrades_a_claim_era_table_with_rows_in_every_state,
);

/// Every due row of `APP` read at `now` by one host owning every partition (a room's rows are in
/// one partition, so per batch), the event ids sorted, and the batches to mark.
async fn read_everything(
    store: &Arc<dyn OutboxStore>,
    now: i64,
) -> (Vec<String>, Vec<outboxd::store::ClaimBatch>) {
    let owner = own_all(store, APP, HOST).await;
    let batches = read_all(store, HOST, &owner, false, now).await;
    let mut got: Vec<String> = batches.iter().flat_map(ids).collect();
    got.sort();
    (got, batches)
}

async fn migrate_is_idempotent(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let applied = store.migrate().await.expect("first migrate");
    assert!(!applied.is_empty(), "a fresh database needs migrations");
    assert!(db.table_exists(DEFAULT_TABLE).await);
    assert_eq!(
        store.migrate().await.expect("second migrate"),
        Vec::<i64>::new()
    );
    let other = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(
        other.migrate().await.expect("migrate from another pool"),
        Vec::<i64>::new()
    );
    assert_eq!(
        enqueue(&other, &[record(APP, "e1", "r", 1)]).await,
        1,
        "table usable"
    );
    assert_eq!(store.backend(), backend);
    assert_eq!(store.table().as_str(), DEFAULT_TABLE);
}

async fn migrate_rejects_invalid_table_names(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    for bad in [
        "",
        "9lives",
        "room-outbox",
        "room outbox",
        "x;drop table y",
        "t`",
        "t\"q",
        "ünï",
    ] {
        let err = TableName::new(bad).expect_err(bad);
        assert!(
            matches!(err, StoreError::InvalidTableName(_)),
            "{bad}: {err:?}"
        );
    }
    assert!(
        TableName::new(&"t".repeat(49)).is_err(),
        "longer than 48 bytes"
    );
    for reserved in ["select", "ORDER", "Table", "where", "group"] {
        assert!(
            TableName::new(reserved).is_err(),
            "reserved word {reserved:?} accepted"
        );
    }
    // Every name that is accepted must work: reserved words are either refused or usable.
    for word in ["select", "order", "user", "table"] {
        if TableName::new(word).is_ok() {
            let store = db.store_unmigrated(word).await;
            let result = store.migrate().await;
            assert!(
                result.is_ok(),
                "TableName accepted {word:?} but migrate failed: {result:?}"
            );
        }
    }
    // A URL the store does not know is refused, not guessed.
    let bad_url = outboxd::store::ConnectOptions::new("redis://127.0.0.1/0");
    assert!(matches!(
        outboxd::store::connect(&bad_url).await,
        Err(StoreError::UnsupportedUrl(_))
    ));
}

async fn migrate_custom_table_names_work(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let longest = format!("t{}", "x".repeat(47));
    assert_eq!(longest.len(), 48);
    let default = db.store_default().await;
    enqueue(&default, &[record(APP, "e1", "r", 1)]).await;
    for table in ["custom_outbox", longest.as_str()] {
        let store = db.store(table).await;
        assert_eq!(store.table().as_str(), table);
        assert!(
            store.migrate().await.unwrap().is_empty(),
            "{table}: second migrate"
        );
        assert_eq!(
            enqueue(
                &store,
                &[record(APP, "e1", "r", 1), record(APP, "e2", "r", 2)]
            )
            .await,
            2,
            "{table}"
        );
        let saved = db
            .save_in_transaction(table, &[vec![record(APP, "e3", "r", 3)]], true)
            .await;
        assert_eq!(saved[0].as_ref().ok(), Some(&1), "{table}: {saved:?}");
        let owner = own_all(&store, APP, HOST).await;
        let batch = read_app(&store, &owner, 10, 1_000).await;
        assert_eq!(ids(&batch), strs(&["e1", "e2", "e3"]), "{table}");
        assert_eq!(
            mark(&store, &batch.lease, &[delivered("e1")], 1_001)
                .await
                .applied,
            1
        );
        assert_eq!(
            db.row_in(table, APP, "e1").await.unwrap().status,
            "delivered"
        );
        assert_eq!(db.all_rows(table).await.len(), 3);
    }
    // The default table saw none of it.
    assert_eq!(db.all_rows(DEFAULT_TABLE).await.len(), 1);
    assert_eq!(status_of(&db, APP, "e1").await, "pending");
}

/// The key columns of migration 0001's claim indexes, each led by the status, as the per-row
/// claim of earlier versions read them.
const STATUS_LED_INDEX_COLUMNS: [&str; 3] = [
    "app_code,status,created_at_ms,event_id",
    "app_code,status,next_retry_at_ms,created_at_ms,event_id",
    "app_code,status,lock_until_ms,created_at_ms,event_id",
];

/// The key columns of the room index of earlier versions' per-room claims.
const ROOM_INDEX_COLUMNS: &str = "app_code,status,room_id,created_at_ms,event_id";

/// Whether `table` has every index outboxd needs on every table (under any name).
async fn has_required_indexes(db: &TestDb, table: &str) -> bool {
    let indexes = db.index_columns(table).await;
    outboxd::store::internals::required_indexes(db.backend, &TableName::default())
        .iter()
        .all(|(_, wanted)| indexes.values().any(|columns| columns == wanted))
}

/// The name on the default table and the key columns of the first index outboxd needs on every
/// table of `backend` besides the partition index.
fn required_index(backend: Backend) -> (String, Vec<&'static str>) {
    outboxd::store::internals::required_indexes(backend, &TableName::default())
        .into_iter()
        .next()
        .expect("a required index")
}

/// Whether `table` has an index of `columns` (comma-separated), under any name.
async fn has_index_of(db: &TestDb, table: &str, columns: &str) -> bool {
    let indexes = db.index_columns(table).await;
    indexes.values().any(|c| c.join(",") == columns)
}

/// The versions of every embedded migration of `backend`, oldest first.
fn all_migrations(backend: Backend) -> Vec<i64> {
    outboxd::store::internals::migrations(backend)
        .iter()
        .map(|m| m.version)
        .collect()
}

async fn migrate_adopts_a_foreign_table(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    // The Go room-service's table: same columns, its own indexes, none of outboxd's.
    db.create_foreign_table(
        DEFAULT_TABLE,
        &[],
        &[("idx_go_legacy", "room_id, created_at_ms")],
    )
    .await;
    db.insert_raw(DEFAULT_TABLE, &[RawInsert::pending(APP, "e1", "r", 1)])
        .await;
    assert!(!has_required_indexes(&db, DEFAULT_TABLE).await);
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(
        store.migrate().await.expect("adopting migrate"),
        all_migrations(backend),
        "every migration, from 1"
    );
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert!(
        has_required_indexes(&db, DEFAULT_TABLE).await,
        "{indexes:?}"
    );
    assert!(
        !has_index_of(&db, DEFAULT_TABLE, ROOM_INDEX_COLUMNS).await,
        "no room index: {indexes:?}"
    );
    assert_eq!(
        indexes.get("idx_go_legacy"),
        Some(&strs(&["room_id", "created_at_ms"])),
        "unrelated index kept"
    );
    assert_eq!(
        store.migrate().await.expect("second migrate"),
        Vec::<i64>::new()
    );
    assert_eq!(
        db.index_columns(DEFAULT_TABLE).await,
        indexes,
        "second migrate changed the indexes"
    );
    assert_eq!(read_everything(&store, 1_000).await.0, strs(&["e1"]));

    // Already recorded as migrated (an earlier outboxd version) but without the indexes: the next
    // migrate still creates them, once. (An index of the required columns under another name
    // counts as present: `schema::tests::required_index_plan`.)
    let table = "adopted_outbox";
    db.create_foreign_table(table, &[], &[("go_status", "app_code, status")])
        .await;
    db.execute(
        &format!(
            "INSERT INTO outboxd_migrations (table_name, version, applied_at_ms) VALUES ({}, 1, 0)",
            db.placeholder(1)
        ),
        &[Bind::Str(table.into())],
    )
    .await;
    let adopted = db.store_unmigrated(table).await;
    assert_eq!(
        adopted.migrate().await.expect("verify-only migrate"),
        all_migrations(backend)[1..].to_vec(),
        "only the migrations after the recorded one"
    );
    let indexes = db.index_columns(table).await;
    assert!(has_required_indexes(&db, table).await, "{indexes:?}");
    let (_, required) = required_index(backend);
    assert_eq!(
        indexes
            .values()
            .filter(|columns| **columns == required)
            .count(),
        1,
        "one index of the required columns: {indexes:?}"
    );
}

/// A table migrated to the last version whose required index was replaced by one of its name
/// and other columns: `migrate` refuses it, names the `DROP INDEX` that clears the way, and
/// after that DROP creates the index.
async fn migrate_refuses_a_status_index_name_with_other_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(store.migrate().await.unwrap(), all_migrations(backend));
    let (name, required) = required_index(backend);
    db.drop_index(DEFAULT_TABLE, &name).await;
    db.execute(
        &format!("CREATE INDEX {name} ON {DEFAULT_TABLE} (app_code, status, next_retry_at_ms)"),
        &[],
    )
    .await;
    let err = store
        .migrate()
        .await
        .expect_err("same-named index of other columns");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "index {name} on room_outbox has columns (app_code, status, next_retry_at_ms) \
             but outboxd needs ({})",
            required.join(", ")
        )),
        "{message}"
    );
    assert!(message.contains("run `outboxd migrate` again"), "{message}");
    // The DROP the message names clears the way; the next migrate creates the index.
    let drop = message
        .split_once("drop it (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(drop, _)| drop.to_string())
        .unwrap_or_else(|| panic!("no DROP INDEX in {message}"));
    assert!(drop.starts_with(&format!("DROP INDEX {name}")), "{drop}");
    db.execute(&drop, &[]).await;
    assert_eq!(
        store.migrate().await.expect("migrate after the drop"),
        Vec::<i64>::new()
    );
    assert!(has_required_indexes(&db, DEFAULT_TABLE).await);
}

async fn migrate_refuses_a_table_missing_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    db.create_foreign_table(DEFAULT_TABLE, &["worker_id", "lock_until_ms"], &[])
        .await;
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let err = store.migrate().await.expect_err("table missing columns");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(
            "table room_outbox lacks the column(s) worker_id, lock_until_ms that outboxd needs"
        ),
        "{message}"
    );
    assert!(
        !has_required_indexes(&db, DEFAULT_TABLE).await,
        "nothing created"
    );
}

/// A table of the per-row claim's era (migration 0001's claim indexes over every row, and the
/// room index, as a Go-era table adopted under their names has them), with rows in every state
/// and a delivered history: `migrate` adds the partitions and drops the claim's retry, lease and
/// room indexes, losing no row and changing none, and partition reads then find exactly the due
/// rows: pending, due retries and expired leases now, later retries and leases once due.
async fn migrate_upgrades_a_claim_era_table_with_rows_in_every_state(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let whole = [
        ("idx_room_outbox_pending", STATUS_LED_INDEX_COLUMNS[0]),
        ("idx_room_outbox_retry", STATUS_LED_INDEX_COLUMNS[1]),
        ("idx_room_outbox_lease", STATUS_LED_INDEX_COLUMNS[2]),
        ("idx_room_outbox_room", ROOM_INDEX_COLUMNS),
    ];
    db.create_foreign_table(DEFAULT_TABLE, &[], &whole).await;
    let later = 1_000_000;
    let mut rows = RawInsert::live_rows_of_each_kind(APP, 2, 0, later);
    rows.extend((0..20).map(|i| {
        let mut row =
            RawInsert::pending(APP, &format!("h{i:02}"), "room0", i).with_status("delivered");
        // As the Go service (and outboxd before the rule on these columns) left retried rows:
        // the last retry time and lease still set on a finished row.
        if i % 2 == 0 {
            row.next_retry_at_ms = Some(500 + i);
            row.lock_until_ms = Some(700 + i);
        }
        row
    }));
    // A retryable row without a retry time: due at once.
    let mut zero = RawInsert::pending(APP, "rz", "room1", 3_000).with_status("retryable");
    zero.next_retry_at_ms = Some(0);
    rows.push(zero);
    db.insert_raw(DEFAULT_TABLE, &rows).await;
    // What no migration may change (a database may clear a finished row's stale retry time and
    // lease, which no claim reads).
    let kept = |rows: Vec<crate::support::RawRow>| -> Vec<_> {
        rows.into_iter()
            .map(|r| {
                (
                    r.event_id,
                    r.status,
                    r.envelope,
                    r.retry_count,
                    r.created_at_ms,
                )
            })
            .collect()
    };
    let before = kept(db.all_rows(DEFAULT_TABLE).await);

    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(store.migrate().await.unwrap(), all_migrations(backend));
    assert_eq!(
        kept(db.all_rows(DEFAULT_TABLE).await),
        before,
        "rows changed"
    );
    assert!(has_required_indexes(&db, DEFAULT_TABLE).await);
    for (_, columns) in &whole[1..] {
        assert!(
            !has_index_of(&db, DEFAULT_TABLE, columns).await,
            "the per-row claim's index ({columns}) is dropped"
        );
    }
    assert!(store.migrate().await.unwrap().is_empty(), "second migrate");

    let (got, batches) = read_everything(&store, 2_000).await;
    assert_eq!(
        got,
        strs(&["dx00", "dx01", "p00", "p01", "rd00", "rd01", "rz"]),
        "pending, due retries, expired leases"
    );
    for batch in &batches {
        let marks: Vec<_> = ids(batch).iter().map(|id| delivered(id)).collect();
        mark(&store, &batch.lease, &marks, 2_010).await;
    }
    let (got, _) = read_everything(&store, 2_020).await;
    assert!(got.is_empty(), "nothing else is due: {got:?}");
    let (got, _) = read_everything(&store, later + 1).await;
    assert_eq!(got, strs(&["dl00", "dl01", "rn00", "rn01"]), "once due");
    for id in ["p00", "rd01", "dx00"] {
        assert_eq!(status_of(&db, APP, id).await, "delivered", "{id}");
    }
    assert_eq!(status_of(&db, APP, "f00").await, "failed");
}
