//! Proof that the lookups by status never walk the history: 100k old `delivered` rows, 20
//! `failed` ones among them, plus live rows (a backlog of 3,000 pending ones in every
//! partition, which a page of pending rows reads about a page of per partition, not all of);
//! then `EXPLAIN` of the console's windows
//! (`store::internals::console_explain_statements`: each status newest first, a page below a
//! position, a time range, the dead letters grouped) must read an index range of about the rows
//! it returns. And for retention: `EXPLAIN` of the exact purge statements the store runs
//! (`store::internals::purge_statement_texts`) on MariaDB and PostgreSQL. The id SELECT must
//! read a range of the status index `(app_code, status, created_at_ms, event_id)` (PostgreSQL:
//! the history index, those columns over finished rows only; MariaDB: of
//! `(app_code, outbox_failed, created_at_ms, event_id)`, the live rows older than the history
//! in it skipped) and (run with ANALYZE) about `LIMIT` rows, the DELETE must address rows by
//! primary key. No planner setting is forced.
//! Then a real purge pass over the same table deletes exactly the old finished rows.

use crate::support;

use outboxd::store::internals::{console_explain_statements, purge_statement_texts};
use outboxd::store::{Backend, DEFAULT_TABLE, PurgeParams, PurgeStatus, TableName};
use support::{Bind, PlanStep, RawInsert, TestDb};

/// Old delivered rows.
const HISTORY: i64 = 100_000;
/// Tenant.
const APP: &str = "app_a";
/// Rows per purge batch explained.
const LIMIT: i64 = 500;
/// Rows created (and changed) before this are purgeable: half the history.
const BEFORE: i64 = HISTORY / 2;

/// Failed rows `f<i>`, spread over the history.
const FAILED: i64 = 20;

/// Pending rows `b<i>` over [`BACKLOG_ROOMS`] rooms (so in every partition), created inside the
/// newer half of the history (not purged; MariaDB's page of delivered rows, which skips the live
/// rows newer than it, does not meet them): a live page must read about a page of them per
/// partition, not all of them.
const BACKLOG: i64 = 3_000;
/// Rooms of the pending backlog.
const BACKLOG_ROOMS: i64 = 300;
/// When the backlog was written: after the purge's cutoff, before the newest delivered page.
const BACKLOG_AT: i64 = BEFORE + 10_000;

/// `HISTORY` delivered rows `h<n>` created and changed at `n`, `FAILED` failed rows spread over
/// the same time, then 20 live rows of each live status, created at 0 (older than everything:
/// retention must still leave them), and a `BACKLOG` of pending rows in the newer half.
async fn seed(db: &TestDb) {
    let envelope = support::record(APP, "h", "room0", 0).encoded_envelope();
    let digits = support::DIGITS;
    let sql = format!(
        "INSERT INTO {DEFAULT_TABLE} (app_code, event_id, event_type, room_id, status, envelope, \
         created_at_ms, updated_at_ms) \
         SELECT '{APP}', CONCAT('h', n), 'History', CONCAT('room', n % 100), 'delivered', {ph}, n, n \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n \
               FROM {digits} a CROSS JOIN {digits} b CROSS JOIN {digits} c CROSS JOIN {digits} e \
               CROSS JOIN {digits} f) s \
         WHERE n < {HISTORY}",
        ph = db.placeholder(1),
    );
    assert_eq!(
        db.execute(&sql, &[Bind::Bytes(envelope)]).await,
        HISTORY as u64
    );
    let mut live: Vec<RawInsert> = (0..FAILED)
        .map(|i| {
            let at = i * (HISTORY / FAILED) + 7;
            let mut row =
                RawInsert::pending(APP, &format!("f{i}"), "room2", at).with_status("failed");
            row.updated_at_ms = Some(at);
            row
        })
        .collect();
    for status in ["pending", "retryable", "delivering"] {
        for i in 0..20 {
            let mut row =
                RawInsert::pending(APP, &format!("{status}{i}"), "room1", 0).with_status(status);
            row.updated_at_ms = Some(0);
            live.push(row);
        }
    }
    live.extend((0..BACKLOG).map(|i| {
        let mut row = RawInsert::pending(
            APP,
            &format!("b{i}"),
            &format!("room{}", i % BACKLOG_ROOMS),
            BACKLOG_AT + i,
        );
        row.updated_at_ms = Some(BACKLOG_AT + i);
        row
    }));
    db.insert_raw(DEFAULT_TABLE, &live).await;
    db.analyze(DEFAULT_TABLE).await;
}

fn show(plan: &[PlanStep]) -> String {
    plan.iter()
        .map(|s| format!("  {}", s.text.replace('\n', "\n    ")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn select_binds() -> Vec<Bind> {
    vec![
        Bind::Str(APP.into()),
        Bind::I64(BEFORE),
        Bind::I64(BEFORE),
        Bind::I64(LIMIT),
    ]
}

/// Ids of the DELETE explained: a length the statement keeps as it is (key lists are padded to
/// a power of two).
const DELETE_IDS: usize = 128;

fn delete_binds(ids: usize) -> Vec<Bind> {
    let mut binds = vec![Bind::Str(APP.into())];
    binds.extend((0..ids).map(|i| Bind::Str(format!("h{i}"))));
    binds.push(Bind::I64(BEFORE));
    binds
}

/// The purge statements on a table of 100k old rows: the id SELECT reads a range of the pending
/// index and about `LIMIT` rows, the DELETE addresses rows by primary key; then a purge pass
/// deletes exactly the old rows.
async fn purge_reads_an_index_range_and_deletes_by_primary_key(backend: Backend) {
    let Some(db) = TestDb::new_server_only(backend).await else {
        return;
    };
    let store = db.store_default().await;
    seed(&db).await;
    let (select, delete) = purge_statement_texts(
        backend,
        &TableName::default(),
        PurgeStatus::Delivered,
        DELETE_IDS,
    );
    match backend {
        Backend::MySql => check_mysql(&db, &select, &delete).await,
        Backend::Postgres => check_postgres(&db, &select, &delete).await,
        Backend::Sqlite => unreachable!("server databases only"),
    }
    purge_pass_deletes_exactly_the_old_rows(&db, &store).await;
}

/// MariaDB's plans of the purge statements (`EXPLAIN`, and `ANALYZE` for the rows read).
async fn check_mysql(db: &TestDb, select: &str, delete: &str) {
    let failed_apart_index = format!("idx_{DEFAULT_TABLE}_failed");
    let plan = db.explain(select, &select_binds()).await;
    let analyzed = db.explain_analyze(select, &select_binds()).await;
    let context = format!("{select}\n{}\nANALYZE:\n{}", show(&plan), show(&analyzed));
    let step = plan
        .iter()
        .find(|s| s.table.is_some())
        .unwrap_or_else(|| panic!("no table step\n{context}"));
    assert!(
        matches!(step.access.as_str(), "range" | "ref"),
        "not an index range\n{context}"
    );
    assert_eq!(
        step.index.as_deref(),
        Some(failed_apart_index.as_str()),
        "{context}"
    );
    let read = analyzed
        .iter()
        .find(|s| s.table.is_some())
        .and_then(|s| s.actual_rows)
        .unwrap_or_else(|| panic!("no r_rows\n{context}"));
    assert!(
        read <= 2.0 * LIMIT as f64,
        "read {read} rows for LIMIT {LIMIT}\n{context}"
    );

    let plan = db.explain(delete, &delete_binds(DELETE_IDS)).await;
    let context = format!("{delete}\n{}", show(&plan));
    let step = plan
        .iter()
        .find(|s| s.table.is_some())
        .unwrap_or_else(|| panic!("no table step\n{context}"));
    assert_eq!(step.access, "range", "{context}");
    assert_eq!(step.index.as_deref(), Some("PRIMARY"), "{context}");
}

/// PostgreSQL's plans of the purge statements (`EXPLAIN ANALYZE` of the SELECT).
async fn check_postgres(db: &TestDb, select: &str, delete: &str) {
    let history_index = format!("idx_{DEFAULT_TABLE}_history");
    let plan = db.explain_analyze(select, &select_binds()).await;
    let context = format!("{select}\n{}", show(&plan));
    assert!(
        !plan.iter().any(|s| s.access.contains("Seq Scan")),
        "sequential scan\n{context}"
    );
    let scan = plan
        .iter()
        .find(|s| s.access.contains("Index"))
        .unwrap_or_else(|| panic!("no index scan\n{context}"));
    assert_eq!(
        scan.index.as_deref(),
        Some(history_index.as_str()),
        "{context}"
    );
    let read = scan.actual_rows.unwrap_or(f64::INFINITY);
    assert!(
        read <= 2.0 * LIMIT as f64,
        "read {read} rows for LIMIT {LIMIT}\n{context}"
    );

    let plan = db.explain(delete, &delete_binds(DELETE_IDS)).await;
    let context = format!("{delete}\n{}", show(&plan));
    assert!(
        !plan.iter().any(|s| s.access.contains("Seq Scan")),
        "sequential scan\n{context}"
    );
    assert!(
        plan.iter().any(
            |s| s.access.contains("Index") && s.text.contains(&format!("{DEFAULT_TABLE}_pkey"))
        ),
        "not by primary key\n{context}"
    );
}

/// Batches of `LIMIT` until a short one: every delivered row created before `BEFORE` goes, the
/// rest of the history and every live row (the 60 older still, the backlog newer) stay.
async fn purge_pass_deletes_exactly_the_old_rows(
    db: &TestDb,
    store: &std::sync::Arc<dyn outboxd::store::OutboxStore>,
) {
    let params = |dry_run| PurgeParams {
        app_code: APP.into(),
        status: PurgeStatus::Delivered,
        before_ms: BEFORE,
        limit: LIMIT as u32,
        dry_run,
    };
    assert_eq!(store.purge(&params(true)).await.unwrap(), BEFORE as u64);
    let mut deleted = 0;
    loop {
        let batch = store.purge(&params(false)).await.unwrap();
        assert!(batch <= LIMIT as u64);
        deleted += batch;
        if batch < LIMIT as u64 {
            break;
        }
    }
    assert_eq!(deleted, BEFORE as u64);
    let rows = db.all_rows(DEFAULT_TABLE).await;
    assert_eq!(rows.len() as i64, HISTORY - BEFORE + FAILED + 60 + BACKLOG);
    assert!(
        rows.iter()
            .filter(|r| r.status == "delivered")
            .all(|r| r.created_at_ms >= BEFORE)
    );
}

/// The console's windows on the same table: every step an index range (no scan of the table or
/// of a whole index), reading at most `WINDOW_READ` rows where the history holds 100k, `failed`
/// rows among them: a page reads about what it shows, whatever the history.
async fn console_windows_read_an_index_range_not_the_history(backend: Backend) {
    let Some(db) = TestDb::new_server_only(backend).await else {
        return;
    };
    let _store = db.store_default().await;
    seed(&db).await;
    for (name, statement) in console_explain_statements(backend, &TableName::default(), APP) {
        let binds: Vec<Bind> = statement.args.iter().map(Bind::from_arg).collect();
        let steps = match backend {
            Backend::MySql => mariadb_table_reads(&db, &statement.sql, &binds).await,
            _ => {
                let plan = db.explain_analyze(&statement.sql, &binds).await;
                plan.iter()
                    .filter(|s| s.table.as_deref() == Some(DEFAULT_TABLE) || s.index.is_some())
                    .map(|s| {
                        (
                            s.access.clone(),
                            s.actual_rows.unwrap_or(0.0),
                            s.text.clone(),
                        )
                    })
                    .collect()
            }
        };
        let context = format!("{name}: {}\n{steps:#?}", statement.sql);
        // A lookup of a missing id reads nothing (MariaDB: an impossible WHERE after the
        // primary key's const read); every other statement reads the table.
        assert!(
            !steps.is_empty() || name == "one event by id",
            "no step reads the table\n{context}"
        );
        for (access, read, _) in &steps {
            assert!(
                !matches!(access.as_str(), "ALL" | "index" | "Seq Scan"),
                "a scan\n{context}"
            );
            assert!(*read <= WINDOW_READ, "read {read} rows\n{context}");
        }
    }
}

/// MariaDB's reads of the outbox table in `ANALYZE FORMAT=JSON` of `sql`: access type, rows the
/// engine returned (`r_rows` of the table, before a filesort or a `WHERE` on top: the tabular
/// form shows the sorted rows instead) and the step. Rows an index condition skipped inside the
/// engine are not counted, so the conditions outboxd writes must bound the index range itself:
/// the test fails on a walk of the tenant's rows either way, as `r_rows` then counts them.
async fn mariadb_table_reads(db: &TestDb, sql: &str, binds: &[Bind]) -> Vec<(String, f64, String)> {
    let json = db
        .query_strings(&format!("ANALYZE FORMAT=JSON {sql}"), binds)
        .await
        .join("");
    let plan: serde_json::Value = serde_json::from_str(&json).expect("ANALYZE FORMAT=JSON");
    let mut reads = Vec::new();
    let mut stack = vec![&plan];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Object(fields) => {
                if fields.get("table_name").and_then(|t| t.as_str()) == Some(DEFAULT_TABLE) {
                    reads.push((
                        fields["access_type"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        fields.get("r_rows").and_then(|r| r.as_f64()).unwrap_or(0.0),
                        value.to_string(),
                    ));
                }
                stack.extend(fields.values());
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    reads
}

/// Most rows one window of 51 may read: the window, the live rows of its status and the
/// failed rows (the dead letters grouped), with room to spare; the history is 100k.
const WINDOW_READ: f64 = 200.0;

support::per_backend!([mysql, postgres] =>
    purge_reads_an_index_range_and_deletes_by_primary_key,
    console_windows_read_an_index_range_not_the_history,
);
