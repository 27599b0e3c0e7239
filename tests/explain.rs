//! Proof that every claim branch reads only the rows it returns, however much delivered history
//! the outbox holds: 200k `delivered` rows plus a few live rows of each kind, then `EXPLAIN` of the
//! exact claim SELECTs the store runs
//! (`store::internals::ClaimStatements::claim_select`), on MariaDB and
//! PostgreSQL, with and without per-room ordering.
//!
//! A branch passes when the outbox table is read through an index range/ref on one of the
//! status-leading claim indexes (`idx_<table>_pending|retry|lease`), the per-room probe through
//! `idx_<table>_room` (or a status-leading index: PostgreSQL may read the tenant's few active rows
//! once instead of probing per candidate), nothing is read by a full scan, and every step
//! estimates about as many rows as the claim returns (≤ 100 for `LIMIT 10`; a probe at most the
//! tenant's live rows), not the 200k of history. No planner setting is
//! forced (no `enable_seqscan = off`): the plans are the ones production gets.

mod support;

use outboxd::store::internals::{ClaimBranch, ClaimStatements, RoomWalk};
use outboxd::store::{Backend, ClaimParams, DEFAULT_TABLE, DeliveryOrder, TableName};
use support::backlog::{APP, HISTORY, LATER, LIVE, NOW, ROOMS};
use support::{Bind, PlanStep, RawInsert, TestDb};

/// The LIMIT explained, and the most rows a step may estimate.
const LIMIT: i64 = 10;
const MAX_ROWS: f64 = 100.0;
/// The most rows a per-room probe may estimate: the live rows of the tenant (`6 * LIVE`, of which
/// 100 are pending, retryable or delivering), never the history.
const MAX_PROBE_ROWS: f64 = 6.0 * LIVE as f64;

/// Fills the table: `HISTORY` delivered rows (created 0..HISTORY, rooms `room0..room999`), then
/// `LIVE` rows each of pending, due retryable, not-due retryable, expired delivering, live
/// delivering and failed, in rooms `room0..room4`, created after the history.
async fn seed(db: &TestDb) {
    let envelope = support::record(APP, "h", "room0", 0).encoded_envelope();
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    // One INSERT … SELECT over a cross join of digit tables: the same SQL on both databases.
    let sql = format!(
        "INSERT INTO {DEFAULT_TABLE} (app_code, event_id, event_type, room_id, status, envelope, \
         created_at_ms, updated_at_ms) \
         SELECT '{APP}', CONCAT('h', n), 'History', CONCAT('room', n % {ROOMS}), 'delivered', {ph}, n, n \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS n \
               FROM {digits} a CROSS JOIN {digits} b CROSS JOIN {digits} c CROSS JOIN {digits} e \
               CROSS JOIN {digits} f CROSS JOIN {digits} g) s \
         WHERE n < {HISTORY}",
        ph = db.placeholder(1),
    );
    let inserted = db.execute(&sql, &[Bind::Bytes(envelope)]).await;
    assert_eq!(inserted, HISTORY as u64);

    let live = RawInsert::live_rows_of_each_kind(APP, LIVE, HISTORY, LATER);
    db.insert_raw(DEFAULT_TABLE, &live).await;
    db.analyze(DEFAULT_TABLE).await;
}

/// The claim index a branch must use.
fn branch_index(branch: ClaimBranch) -> String {
    let suffix = match branch {
        ClaimBranch::Pending => "pending",
        ClaimBranch::Retryable => "retry",
        ClaimBranch::ExpiredLease => "lease",
    };
    format!("idx_{DEFAULT_TABLE}_{suffix}")
}

/// Indexes a per-room probe may use: the room index, or any status-leading one (the probe asks
/// for active statuses only, so history stays out of reach either way).
fn probe_indexes() -> Vec<String> {
    ["room", "pending", "retry", "lease"]
        .iter()
        .map(|s| format!("idx_{DEFAULT_TABLE}_{s}"))
        .collect()
}

fn binds(branch: ClaimBranch) -> Vec<Bind> {
    let mut binds = vec![Bind::Str(APP.into())];
    if branch != ClaimBranch::Pending {
        binds.push(Bind::I64(NOW));
    }
    binds.push(Bind::I64(LIMIT));
    binds
}

fn show(plan: &[PlanStep]) -> String {
    plan.iter()
        .map(|s| format!("  {}", s.text.replace('\n', "\n    ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A MariaDB plan step named for a failure: its table and select id (`p (id=4)`).
fn node(step: &PlanStep) -> String {
    let id = step.text.split(' ').next().unwrap_or_default();
    format!("{} ({id})", step.table.as_deref().unwrap_or("?"))
}

/// MariaDB: the `ANALYZE` plan has the `EXPLAIN` plan's steps, in its order (each checked
/// against its run).
fn aligned(plan: &[PlanStep], analyzed: &[PlanStep], context: &str) {
    let tables = |steps: &[PlanStep]| -> Vec<Option<String>> {
        steps.iter().map(|s| s.table.clone()).collect()
    };
    assert_eq!(
        tables(plan),
        tables(analyzed),
        "EXPLAIN and ANALYZE steps differ\n{context}"
    );
}

/// MariaDB: every step reading the table uses an index range/ref/eq_ref (never `ALL` or a full
/// `index` scan); the claim step (`c`) uses the branch's index and estimates at most `MAX_ROWS`
/// rows; each room probe (`p`) looks up (app_code, room_id, status) — all three in its `ref`, so
/// delivered history is never under the key — and, run with `ANALYZE`, reads at most
/// `MAX_PROBE_ROWS` rows per lookup. (A probe's *estimate* is the index's average rows per key,
/// which the history dominates, so it says nothing about the live keys probed: the actual rows do.)
fn check_mysql(
    branch: ClaimBranch,
    ordering: DeliveryOrder,
    plan: &[PlanStep],
    analyzed: &[PlanStep],
) {
    let context = format!(
        "{branch:?}/{ordering:?}:\n{}\nANALYZE:\n{}",
        show(plan),
        show(analyzed)
    );
    let mut claim_step = false;
    let mut probe_steps = 0;
    // Room probes the statement ran (r_rows not NULL).
    let mut probes_run = 0;
    aligned(plan, analyzed, &context);
    for (step, run) in plan.iter().zip(analyzed) {
        let Some(table) = step.table.as_deref() else {
            continue;
        };
        assert!(
            ["range", "ref", "eq_ref", "ref_or_null"].contains(&step.access.as_str()),
            "{table}: access {} is not an index range/ref\n{context}",
            step.access
        );
        let rows = step.rows.unwrap_or(f64::INFINITY);
        match table {
            "c" => {
                claim_step = true;
                assert_eq!(
                    step.index.as_deref(),
                    Some(branch_index(branch).as_str()),
                    "claim index\n{context}"
                );
                assert!(
                    rows <= MAX_ROWS,
                    "claim step estimates {rows} rows\n{context}"
                );
            }
            "p" => {
                probe_steps += 1;
                let index = step.index.clone().unwrap_or_default();
                assert!(
                    probe_indexes().contains(&index),
                    "room probe uses {index}\n{context}"
                );
                let key_parts = step
                    .text
                    .split(" ref=")
                    .nth(1)
                    .unwrap_or("")
                    .split(' ')
                    .next()
                    .unwrap_or("");
                assert!(
                    key_parts.split(',').count() >= 3,
                    "room probe looks up {key_parts:?}: the status is not part of the key\n{context}"
                );
                match run.actual_rows {
                    Some(actual) => {
                        probes_run += 1;
                        assert!(
                            actual <= MAX_PROBE_ROWS,
                            "room probe {} read {actual} rows per lookup\n{context}",
                            node(run)
                        );
                    }
                    // `r_rows=NULL`: never executed (an earlier NOT EXISTS already decided). A
                    // step without the column was not analyzed at all.
                    None => assert!(
                        run.text.contains(" r_rows=NULL "),
                        "room probe {}: no r_rows in the ANALYZE plan\n{context}",
                        node(run)
                    ),
                }
            }
            other => panic!("unexpected table {other}\n{context}"),
        }
    }
    assert!(claim_step, "no step reads the outbox\n{context}");
    let expected_probes = if ordering == DeliveryOrder::PerRoom {
        1
    } else {
        0
    };
    assert_eq!(probe_steps.min(1), expected_probes, "room probe\n{context}");
    assert_eq!(
        probes_run.min(1),
        expected_probes,
        "room probes run (what one reads is shown by those only)\n{context}"
    );
}

/// PostgreSQL: no `Seq Scan`; the claim scan (`c`) is an Index Scan / Index Only Scan / Bitmap
/// scan on the branch's index, the probe (`p`) on the room index; no scan estimates more than
/// `MAX_ROWS` rows.
fn check_postgres(branch: ClaimBranch, ordering: DeliveryOrder, plan: &[PlanStep]) {
    let context = format!("{branch:?}/{ordering:?}:\n{}", show(plan));
    assert!(
        !plan.iter().any(|s| s.access.contains("Seq Scan")),
        "sequential scan\n{context}"
    );
    let mut claim_step = false;
    let mut probe_step = false;
    for step in plan.iter().filter(|s| s.access.contains("Scan")) {
        let rows = step.rows.unwrap_or(f64::INFINITY);
        if step.access == "Bitmap Heap Scan" {
            // Reads what its Bitmap Index Scan child found; that child is checked.
            assert!(rows <= MAX_PROBE_ROWS, "estimates {rows} rows\n{context}");
            continue;
        }
        let Some(index) = step.index.as_deref() else {
            panic!("{} without an index\n{context}", step.access);
        };
        // `… on room_outbox c` (the claim) / `… on room_outbox p` (the room probe); a Bitmap
        // Index Scan names only the index, its Bitmap Heap Scan parent the alias.
        let alias = step
            .text
            .split("  (")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .last()
            .unwrap_or("");
        if alias == "p" || (index != branch_index(branch) && ordering == DeliveryOrder::PerRoom) {
            probe_step = true;
            assert!(
                probe_indexes().iter().any(|i| i == index),
                "room probe uses {index}\n{context}"
            );
            assert!(
                rows <= MAX_PROBE_ROWS,
                "room probe estimates {rows} rows\n{context}"
            );
        } else {
            claim_step = true;
            assert_eq!(index, branch_index(branch), "claim index\n{context}");
            assert!(
                rows <= MAX_ROWS,
                "claim scan estimates {rows} rows\n{context}"
            );
        }
    }
    assert!(
        claim_step,
        "the claim does not scan {}\n{context}",
        branch_index(branch)
    );
    assert_eq!(
        probe_step,
        ordering == DeliveryOrder::PerRoom,
        "room probe\n{context}"
    );
}

/// Per-room claim parameters for the seeded tenant.
fn per_room() -> ClaimParams {
    ClaimParams {
        app_code: APP.into(),
        worker_id: "w".into(),
        limit: LIMIT as u32,
        lease_ms: 1_000,
        now_ms: NOW,
        max_attempts: 100,
        ordering: DeliveryOrder::PerRoom,
        scan_due: false,
    }
}

/// The pending branch of a per-room claim reads room heads through the room index, one seek per
/// room with pending events (the seeded pending rows are in 5 rooms; the history in 1,000):
/// MariaDB by a loose index scan ("Using index for group-by") whose groups are the rooms with
/// pending events, each head's millisecond (`y`) and the probes (`p`) by a ref on the room
/// index, the head (`c`) by primary key; PostgreSQL by index-only seeks of the room index (`x`),
/// each head by primary key. No step reads history.
fn check_room_heads(backend: Backend, walk: &RoomWalk, plan: &[PlanStep], analyzed: &[PlanStep]) {
    let context = format!(
        "room heads {walk:?}:\n{}\nANALYZE:\n{}",
        show(plan),
        show(analyzed)
    );
    let room_index = format!("idx_{DEFAULT_TABLE}_room");
    let mut seeks = 0;
    match backend {
        Backend::MySql => {
            aligned(plan, analyzed, &context);
            for (step, run) in plan.iter().zip(analyzed) {
                let Some(table) = step.table.as_deref() else {
                    continue;
                };
                if table.starts_with("<derived") {
                    // The rooms found: at most the rooms with pending rows.
                    let rooms = run.actual_rows.unwrap_or_else(|| {
                        panic!("{}: no r_rows in the ANALYZE plan\n{context}", node(run))
                    });
                    assert!(rooms <= 5.0, "{rooms} rooms\n{context}");
                    continue;
                }
                assert!(
                    ["range", "ref", "eq_ref"].contains(&step.access.as_str()),
                    "{table}: access {}\n{context}",
                    step.access
                );
                // The heads by primary key, everything else through the room index.
                let index = if table == "c" {
                    "PRIMARY"
                } else {
                    room_index.as_str()
                };
                assert_eq!(step.index.as_deref(), Some(index), "{table}\n{context}");
                if table == "x" {
                    seeks += 1;
                    assert!(
                        step.text.contains("Using index for group-by"),
                        "not a loose index scan\n{context}"
                    );
                }
                let actual = run.actual_rows.unwrap_or_else(|| {
                    panic!("{}: no r_rows in the ANALYZE plan\n{context}", node(run))
                });
                assert!(
                    actual <= MAX_PROBE_ROWS,
                    "{} read {actual} rows\n{context}",
                    node(run)
                );
            }
        }
        Backend::Postgres => {
            assert!(
                !plan.iter().any(|s| s.access.contains("Seq Scan")),
                "sequential scan\n{context}"
            );
            for step in plan.iter().filter(|s| s.access.contains("Scan")) {
                if ["CTE Scan", "WorkTable Scan", "Subquery Scan"].contains(&step.access.as_str()) {
                    continue;
                }
                let index = step.index.as_deref().unwrap_or_default();
                let rows = step.rows.unwrap_or(f64::INFINITY);
                assert!(rows <= MAX_PROBE_ROWS, "{index}: {rows} rows\n{context}");
                if index == room_index && step.access == "Index Only Scan" {
                    seeks += 1;
                } else {
                    assert!(
                        index == room_index || index == format!("{DEFAULT_TABLE}_pkey"),
                        "reads {index}\n{context}"
                    );
                }
            }
        }
        Backend::Sqlite => unreachable!(),
    }
    assert!(seeks > 0, "no seek of the room index\n{context}");
}

async fn claim_branches_read_only_what_they_return(backend: Backend) {
    let Some(db) = TestDb::new_server_only(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let started = std::time::Instant::now();
    seed(&db).await;
    eprintln!(
        "{backend:?}: seeded {HISTORY} delivered rows in {:?}",
        started.elapsed()
    );

    let statements = ClaimStatements::new(backend, &TableName::default());
    for walk in [
        RoomWalk::Head,
        RoomWalk::After("room1".into()),
        RoomWalk::UpTo("room3".into()),
    ] {
        let heads = statements.claim_query_walk(ClaimBranch::Pending, &per_room(), 10, &walk);
        let binds: Vec<Bind> = heads.args.iter().map(Bind::from_arg).collect();
        let plan = db.explain(&heads.sql, &binds).await;
        eprintln!("{backend:?} room heads {walk:?}:\n{}", show(&plan));
        let analyzed = match backend {
            Backend::MySql => db.explain_analyze(&heads.sql, &binds).await,
            _ => Vec::new(),
        };
        check_room_heads(backend, &walk, &plan, &analyzed);
    }
    for ordering in [DeliveryOrder::None, DeliveryOrder::PerRoom] {
        for branch in ClaimBranch::ALL {
            if (branch, ordering) == (ClaimBranch::Pending, DeliveryOrder::PerRoom) {
                continue; // the room heads, above
            }
            let sql = statements.claim_select(branch, ordering);
            let plan = db.explain(sql, &binds(branch)).await;
            eprintln!("{backend:?} {branch:?}/{ordering:?}:\n{}", show(&plan));
            match backend {
                Backend::MySql => {
                    // Runs the SELECT (autocommit: its row locks end with it) to get r_rows.
                    let analyzed = db.explain_analyze(sql, &binds(branch)).await;
                    eprintln!("ANALYZE:\n{}", show(&analyzed));
                    check_mysql(branch, ordering, &plan, &analyzed)
                }
                Backend::Postgres => check_postgres(branch, ordering, &plan),
                Backend::Sqlite => unreachable!(),
            }
        }
    }

    // The statements explained are the ones the store runs: a real claim takes the live rows in
    // branch order and leaves history, failed rows, not-due retries and live leases alone.
    let batch = store
        .claim(&ClaimParams {
            app_code: APP.into(),
            worker_id: "w-new".into(),
            limit: 100,
            lease_ms: 1_000,
            now_ms: NOW,
            max_attempts: 100,
            ordering: DeliveryOrder::None,
            scan_due: true,
        })
        .await
        .expect("claim");
    let ids: Vec<&str> = batch
        .events
        .iter()
        .map(|e| e.event.event_id.as_str())
        .collect();
    assert_eq!(ids.len() as i64, 3 * LIVE, "{ids:?}");
    assert!(
        ids[..LIVE as usize].iter().all(|id| id.starts_with('p')),
        "{ids:?}"
    );
    assert!(
        ids[LIVE as usize..2 * LIVE as usize]
            .iter()
            .all(|id| id.starts_with("rd")),
        "{ids:?}"
    );
    assert!(
        ids[2 * LIVE as usize..]
            .iter()
            .all(|id| id.starts_with("dx")),
        "{ids:?}"
    );
    db.cleanup().await;
}

support::per_backend!([mysql, postgres] => claim_branches_read_only_what_they_return);
