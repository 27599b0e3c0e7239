//! `migrate`: creating the outbox table and its claim indexes, table names, and adopting (or
//! refusing) a table another program created.

use outboxd::store::{Backend, DEFAULT_TABLE, MigrateOptions, StoreError, TableName};

use crate::helpers::{APP, claim_app, delivered, enqueue, ids, mark, status_of, strs};
use crate::support::{Bind, RawInsert, TestDb, record};

crate::support::per_backend!(
    migrate_is_idempotent,
    migrate_rejects_invalid_table_names,
    migrate_custom_table_names_work,
    migrate_adopts_a_foreign_table,
    migrate_refuses_a_claim_index_name_with_other_columns,
    migrate_refuses_a_table_missing_columns,
    migrate_creates_the_room_index_only_when_asked,
    migrate_refuses_a_room_index_name_with_other_columns,
    migrate_drops_the_room_index_of_an_earlier_version,
    migrate_keeps_the_room_index_of_an_earlier_version_when_asked,
    migrate_rebuilds_a_room_index_of_the_former_columns,
    migrate_upgrades_whole_claim_indexes_with_rows_in_every_state,
);

/// `migrate` with the room index (`outboxd migrate` with `worker.ordering = "per-room"`).
const WITH_ROOM_INDEX: MigrateOptions = MigrateOptions { room_index: true };

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
        let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
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

/// The key columns of migration 0001's claim indexes, each led by the status: what the claims
/// read on every database before MySQL's / MariaDB's migration 0003 (and still on the others).
const STATUS_LED_INDEX_COLUMNS: [&str; 3] = [
    "app_code,status,created_at_ms,event_id",
    "app_code,status,next_retry_at_ms,created_at_ms,event_id",
    "app_code,status,lock_until_ms,created_at_ms,event_id",
];

/// The key columns of the room index, which only per-room claims read.
const ROOM_INDEX_COLUMNS: &str = "app_code,status,room_id,created_at_ms,event_id";

/// Whether `table` has every claim index the backend's claims read (under any name).
async fn has_claim_indexes(db: &TestDb, table: &str) -> bool {
    let indexes = db.index_columns(table).await;
    outboxd::store::internals::claim_index_columns(db.backend)
        .iter()
        .all(|wanted| indexes.values().any(|columns| columns == wanted))
}

/// Whether `table` has the room index (under any name).
async fn has_room_index(db: &TestDb, table: &str) -> bool {
    let indexes = db.index_columns(table).await;
    indexes
        .values()
        .any(|columns| columns.join(",") == ROOM_INDEX_COLUMNS)
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
    assert!(!has_claim_indexes(&db, DEFAULT_TABLE).await);
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(
        store.migrate().await.expect("adopting migrate"),
        all_migrations(backend),
        "every migration, from 1"
    );
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await, "{indexes:?}");
    assert!(
        !has_room_index(&db, DEFAULT_TABLE).await,
        "the room index is not part of the base schema: {indexes:?}"
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
    assert_eq!(
        ids(&claim_app(&store, "w1", 10, 1_000, 1_000).await),
        strs(&["e1"])
    );

    // Already recorded as migrated (an earlier outboxd version) but without the indexes: the next
    // migrate still creates them, under any name the columns are not already indexed by.
    let table = "adopted_outbox";
    db.create_foreign_table(
        table,
        &[],
        &[("go_claim", "app_code, status, created_at_ms, event_id")],
    )
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
    assert!(has_claim_indexes(&db, table).await, "{indexes:?}");
    assert!(
        !indexes.contains_key("idx_adopted_outbox_pending"),
        "pending columns were indexed already: {indexes:?}"
    );
}

async fn migrate_refuses_a_claim_index_name_with_other_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    db.create_foreign_table(
        DEFAULT_TABLE,
        &[],
        &[(
            "idx_room_outbox_pending",
            "app_code, status, next_retry_at_ms",
        )],
    )
    .await;
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let err = store
        .migrate()
        .await
        .expect_err("same-named index of other columns");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(
            "index idx_room_outbox_pending on room_outbox has columns (app_code, status, next_retry_at_ms) \
             but outboxd needs (app_code, status, created_at_ms, event_id)"
        ),
        "{message}"
    );
    assert!(message.contains("run `outboxd migrate` again"), "{message}");
    // Nothing was recorded; the DROP the message names clears the way.
    let drop = message
        .split_once("drop it (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(drop, _)| drop.to_string())
        .unwrap_or_else(|| panic!("no DROP INDEX in {message}"));
    assert!(
        drop.starts_with("DROP INDEX idx_room_outbox_pending"),
        "{drop}"
    );
    db.execute(&drop, &[]).await;
    assert_eq!(
        store.migrate().await.expect("migrate after the drop"),
        all_migrations(backend)
    );
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await);
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
        !has_claim_indexes(&db, DEFAULT_TABLE).await,
        "nothing created"
    );
}

/// Without options `migrate` leaves the room index out (the base schema); with
/// [`MigrateOptions::room_index`] it creates `idx_<table>_room` on a migrated table, applying no
/// migration, idempotently; a later plain `migrate` keeps it. Per-room claims work either way.
async fn migrate_creates_the_room_index_only_when_asked(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(store.migrate().await.unwrap(), all_migrations(backend));
    let base = db.index_columns(DEFAULT_TABLE).await;
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await, "{base:?}");
    assert!(!has_room_index(&db, DEFAULT_TABLE).await, "{base:?}");
    assert!(!base.contains_key("idx_room_outbox_room"), "{base:?}");

    assert_eq!(
        store.migrate_with(&WITH_ROOM_INDEX).await.unwrap(),
        Vec::<i64>::new(),
        "the room index is no migration"
    );
    let with_room = db.index_columns(DEFAULT_TABLE).await;
    assert_eq!(
        with_room.get("idx_room_outbox_room"),
        Some(&strs(&[
            "app_code",
            "status",
            "room_id",
            "created_at_ms",
            "event_id"
        ])),
        "{with_room:?}"
    );
    assert_eq!(
        with_room.len(),
        base.len() + 1,
        "only the room index added: {with_room:?}"
    );
    assert!(
        store
            .migrate_with(&WITH_ROOM_INDEX)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        db.index_columns(DEFAULT_TABLE).await,
        with_room,
        "second migrate with the room index"
    );
    assert!(store.migrate().await.unwrap().is_empty());
    assert_eq!(
        db.index_columns(DEFAULT_TABLE).await,
        with_room,
        "a plain migrate never drops the room index"
    );

    // A fresh table migrated with the room index in one go gets the same indexes.
    let other = db.store_unmigrated("other_outbox").await;
    assert_eq!(
        other.migrate_with(&WITH_ROOM_INDEX).await.unwrap(),
        all_migrations(backend)
    );
    assert!(has_claim_indexes(&db, "other_outbox").await);
    assert!(
        db.index_columns("other_outbox")
            .await
            .contains_key("idx_other_outbox_room")
    );
    enqueue(
        &other,
        &[record(APP, "e1", "r", 1), record(APP, "e2", "r", 2)],
    )
    .await;
    let mut p = crate::helpers::params(APP, "w1", 10, 1_000, 1_000);
    p.ordering = outboxd::store::DeliveryOrder::PerRoom;
    let batch = crate::helpers::claim(&other, p).await;
    assert_eq!(ids(&batch), strs(&["e1"]), "the room's head only");
}

/// With the room index asked for, an index named like it but of other columns is refused as the
/// claim indexes are (the message names the fix); a plain `migrate` does not look at it.
async fn migrate_refuses_a_room_index_name_with_other_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    db.execute(
        "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, room_id)",
        &[],
    )
    .await;
    let err = store
        .migrate_with(&WITH_ROOM_INDEX)
        .await
        .expect_err("same-named index of other columns");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(
            "index idx_room_outbox_room on room_outbox has columns (app_code, room_id) \
             but outboxd needs (app_code, status, room_id, created_at_ms, event_id)"
        ),
        "{message}"
    );
    assert!(message.contains("run `outboxd migrate` again"), "{message}");
    assert!(
        store.migrate().await.unwrap().is_empty(),
        "the base schema does not need it"
    );
    let drop = message
        .split_once("drop it (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(drop, _)| drop.to_string())
        .unwrap_or_else(|| panic!("no DROP INDEX in {message}"));
    db.execute(&drop, &[]).await;
    store.migrate_with(&WITH_ROOM_INDEX).await.unwrap();
    assert!(has_room_index(&db, DEFAULT_TABLE).await);
}

/// A table migrated by an earlier version (the room index part of the base schema) loses the
/// index in the versioned migration that took it out of the base schema, rows and claims intact;
/// that migration is safe to run again.
async fn migrate_drops_the_room_index_of_an_earlier_version(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue(&store, &[record(APP, "e1", "r", 1)]).await;
    // As an earlier version left it: the room index there, the migration not yet applied.
    let drop_migration = forget_room_index_drop(&db, DEFAULT_TABLE).await;
    assert!(has_room_index(&db, DEFAULT_TABLE).await);
    assert_eq!(store.migrate().await.unwrap(), vec![drop_migration]);
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert!(!indexes.contains_key("idx_room_outbox_room"), "{indexes:?}");
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await, "{indexes:?}");
    // Applied again (as after a crash between the DDL and its record on MySQL/MariaDB).
    forget_room_index_drop(&db, DEFAULT_TABLE).await;
    assert_eq!(store.migrate().await.unwrap(), vec![drop_migration]);
    assert_eq!(
        ids(&claim_app(&store, "w1", 10, 1_000, 1_000).await),
        strs(&["e1"])
    );
}

/// Makes `table` look migrated by an earlier version (the room index part of the base schema):
/// forgets the migration that took the room index out of it. Returns that migration's version.
async fn forget_room_index_drop(db: &TestDb, table: &str) -> i64 {
    let version = outboxd::store::internals::migrations(db.backend)
        .iter()
        .find(|m| m.name.ends_with("_room_index_on_demand"))
        .expect("the migration that drops the room index")
        .version;
    db.execute(
        &format!(
            "DELETE FROM outboxd_migrations WHERE table_name = '{table}' AND version = {}",
            db.placeholder(1)
        ),
        &[Bind::I64(version)],
    )
    .await;
    version
}

/// Upgrading a per-room table of an earlier version with the room index (`outboxd migrate` with
/// `worker.ordering = "per-room"`) records the migration that drops the room index without
/// running it: the very same index stays (not dropped and built again), and a later plain
/// `migrate` keeps it; per-room claims work throughout.
async fn migrate_keeps_the_room_index_of_an_earlier_version_when_asked(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue(
        &store,
        &[record(APP, "e1", "r", 1), record(APP, "e2", "r", 2)],
    )
    .await;
    let drop_migration = forget_room_index_drop(&db, DEFAULT_TABLE).await;
    let before = db
        .index_identity(DEFAULT_TABLE, "idx_room_outbox_room")
        .await
        .expect("the room index, as an earlier version made it");
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert_eq!(
        store.migrate_with(&WITH_ROOM_INDEX).await.unwrap(),
        vec![drop_migration],
        "recorded as applied"
    );
    assert_eq!(
        db.index_identity(DEFAULT_TABLE, "idx_room_outbox_room")
            .await,
        Some(before.clone()),
        "the very same room index, never dropped nor rebuilt"
    );
    assert_eq!(db.index_columns(DEFAULT_TABLE).await, indexes);
    assert!(store.migrate().await.unwrap().is_empty());
    assert_eq!(
        db.index_identity(DEFAULT_TABLE, "idx_room_outbox_room")
            .await,
        Some(before),
        "the drop is recorded: a later plain migrate keeps the index"
    );
    store
        .check_ordering(outboxd::store::DeliveryOrder::PerRoom)
        .await
        .expect("per-room ordering");
    let mut p = crate::helpers::params(APP, "w1", 10, 1_000, 1_000);
    p.ordering = outboxd::store::DeliveryOrder::PerRoom;
    assert_eq!(ids(&crate::helpers::claim(&store, p).await), strs(&["e1"]));
}

/// A per-room table whose room index has the columns earlier builds gave it
/// `(app_code, room_id, status, …)` (which serves the probes but not the room heads): a per-room
/// worker refuses to start and says to migrate; `migrate` with the room index rebuilds it, with
/// rows in every state, and per-room claims go on where they were.
async fn migrate_rebuilds_a_room_index_of_the_former_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let name = "idx_room_outbox_room";
    db.execute(
        &format!(
            "CREATE INDEX {name} ON {DEFAULT_TABLE} (app_code, room_id, status, created_at_ms, event_id)"
        ),
        &[],
    )
    .await;
    let heads = [
        record(APP, "a1", "ra", 1),
        record(APP, "b1", "rb", 3),
        record(APP, "c1", "rc", 4),
        record(APP, "d1", "rd", 6),
    ];
    enqueue(&store, &heads).await;
    let claimed = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    assert_eq!(ids(&claimed), strs(&["a1", "b1", "c1", "d1"]));
    let marks = [
        delivered("a1"),
        crate::helpers::retryable("b1", 1_000_000, "later"),
        crate::helpers::failed("c1", "dead"),
    ];
    mark(&store, &claimed.lease, &marks, 1_010).await;
    enqueue(
        &store,
        &[
            record(APP, "a2", "ra", 7),
            record(APP, "b2", "rb", 8),
            record(APP, "c2", "rc", 9),
            record(APP, "d2", "rd", 10),
        ],
    )
    .await;
    // a1 delivered, b1 retryable, c1 failed, d1 delivering; the second events pending.
    let refused = store
        .check_ordering(outboxd::store::DeliveryOrder::PerRoom)
        .await
        .expect_err("the room index of the former columns");
    assert!(
        refused.to_string().contains("run `outboxd migrate`"),
        "{refused}"
    );
    store.migrate_with(&WITH_ROOM_INDEX).await.unwrap();
    assert_eq!(
        db.index_columns(DEFAULT_TABLE).await.get(name).cloned(),
        Some(strs(&[
            "app_code",
            "status",
            "room_id",
            "created_at_ms",
            "event_id"
        ]))
    );
    store
        .check_ordering(outboxd::store::DeliveryOrder::PerRoom)
        .await
        .expect("per-room ordering after the rebuild");
    // a2 follows its delivered head, c2 its failed one; b2 waits behind its retryable head, d2
    // behind its lease.
    let mut p = crate::helpers::params(APP, "w2", 10, 1_020, 1_000);
    p.ordering = outboxd::store::DeliveryOrder::PerRoom;
    let mut got = ids(&crate::helpers::claim(&store, p).await);
    got.sort();
    assert_eq!(got, strs(&["a2", "c2"]));
    for (id, status) in [
        ("a1", "delivered"),
        ("b1", "retryable"),
        ("c1", "failed"),
        ("d1", "delivering"),
    ] {
        assert_eq!(status_of(&db, APP, id).await, status, "{id}");
    }
}

/// A table whose claim indexes cover every row, as migration 0001 made them (and as a Go-era
/// table adopted under their names has them), with rows in every state and a delivered history:
/// `migrate` replaces the indexes with the ones this version's claims read (on some databases over
/// live rows only), losing no row and changing none, and every claim branch then finds exactly
/// its rows: pending, due retries and expired leases now, later retries and leases once due.
async fn migrate_upgrades_whole_claim_indexes_with_rows_in_every_state(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let whole = [
        ("idx_room_outbox_pending", STATUS_LED_INDEX_COLUMNS[0]),
        ("idx_room_outbox_retry", STATUS_LED_INDEX_COLUMNS[1]),
        ("idx_room_outbox_lease", STATUS_LED_INDEX_COLUMNS[2]),
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
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await);
    assert!(store.migrate().await.unwrap().is_empty(), "second migrate");

    let mut now = claim_app(&store, "w1", 100, 2_000, 1_000).await;
    let mut got = ids(&now);
    got.sort();
    assert_eq!(
        got,
        strs(&["dx00", "dx01", "p00", "p01", "rd00", "rd01", "rz"]),
        "pending, due retries, expired leases"
    );
    let marks: Vec<_> = got.iter().map(|id| delivered(id)).collect();
    mark(&store, &now.lease, &marks, 2_010).await;
    now = claim_app(&store, "w1", 100, 2_020, 1_000).await;
    assert!(ids(&now).is_empty(), "nothing else is due: {:?}", ids(&now));
    let due_later = claim_app(&store, "w1", 100, later + 1, 1_000).await;
    let mut got = ids(&due_later);
    got.sort();
    assert_eq!(got, strs(&["dl00", "dl01", "rn00", "rn01"]), "once due");
    for id in ["p00", "rd01", "dx00"] {
        assert_eq!(status_of(&db, APP, id).await, "delivered", "{id}");
    }
    assert_eq!(status_of(&db, APP, "f00").await, "failed");
}
