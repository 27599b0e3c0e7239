//! PostgreSQL's store sessions cache plans and never read the outbox table sequentially
//! (`enable_seqscan = off`, `plan_cache_mode = auto`: `store::postgres`'s session setup). After
//! five executions PostgreSQL may run a prepared statement on a generic plan and keep it for the
//! connection's life, so a generic plan made while the table was empty (a fresh deployment:
//! `migrate`, then the host starts before the first rows) must still read through an index once
//! the rows arrive. With sequential scans allowed it did not: commit → delivered p50 11–14 ms
//! instead of ~3 ms at 2,000 rows/s (the git history of docs/PERFORMANCE.md, "Generic plans on a
//! table that starts empty").
//!
//! - A fresh host's rounds on an empty table run their reads and marks on generic plans
//!   (`pg_prepared_statements` counts, per session, how often each statement ran on which plan).
//! - The generic plans of the read (one partition, several) and of the mark and its listing of
//!   the rows it changed (one partition, several), made on the table empty, analyzed empty, and analyzed with 300 rows, read it
//!   through an index, never a `Seq Scan` (without `enable_seqscan = off`, the read's plan on
//!   the table analyzed empty is a `Seq Scan` and a sort).
//! - A mark of more than 64 rows does not run on the cached plan (a generic plan compares each
//!   row with every id of the bound array in turn): it is sent unprepared, planned for its ids.

use crate::support;

use outboxd::record::now_ms;
use outboxd::store::internals::{
    Arg, Bound, MarkAt, POSTGRES_SESSION_SETUP, mark_statements, partition_read_statement,
};
use outboxd::store::postgres::PostgresStore;
use outboxd::store::{
    Backend, DEFAULT_TABLE, Lease, Mark, OutboxStore, PartitionBatch, PartitionFence,
    PartitionRead, TableName,
};
use sqlx::{Connection, PgConnection, Row};
use support::{HandHost, TestDb, mark_delivered, record};

const APP: &str = "app_a";

/// The table's partitions per tenant (a new table's).
const PARTITIONS: u32 = 64;

/// Executions of the session's prepared statements whose text starts with `prefix`: on
/// generic plans, on custom plans.
async fn executions(store: &PostgresStore, prefix: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(sum(generic_plans), 0)::bigint, coalesce(sum(custom_plans), 0)::bigint \
         FROM pg_prepared_statements WHERE starts_with(statement, $1)",
    )
    .bind(prefix)
    .fetch_one(store.pool())
    .await
    .expect("read pg_prepared_statements")
}

/// `arg` as a SQL literal.
fn literal(arg: &Arg) -> String {
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    match arg {
        Arg::Text(s) => quoted(s),
        Arg::Int(n) => n.to_string(),
        Arg::Bytes(b) => format!(
            "'\\x{}'::bytea",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
        Arg::TextList(list) => format!(
            "ARRAY[{}]::text[]",
            list.iter()
                .map(|s| quoted(s))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The generic plan of `statement` as the store's sessions make it (their setup, then
/// `force_generic_plan`), on the table as it is now.
async fn generic_plan(conn: &mut PgConnection, name: &str, statement: &Bound) -> String {
    let types: Vec<&str> = statement
        .args
        .iter()
        .map(|arg| match arg {
            Arg::Text(_) => "text",
            Arg::Int(_) => "bigint",
            Arg::Bytes(_) => "bytea",
            Arg::TextList(_) => "text[]",
        })
        .collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DEALLOCATE ALL; PREPARE {name}({}) AS {}",
        types.join(", "),
        statement.sql
    )))
    .execute(&mut *conn)
    .await
    .unwrap_or_else(|e| panic!("prepare {name}: {e}\n{}", statement.sql));
    let args: Vec<String> = statement.args.iter().map(literal).collect();
    let explain = format!("EXPLAIN EXECUTE {name}({})", args.join(", "));
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(explain))
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("explain {name}: {e}"));
    rows.iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Host `h1` of `APP`, by hand.
const HOST: HandHost<'static> = HandHost {
    app: APP,
    id: "h1",
    lease_ms: 30_000,
};

/// Reads each partition host `h1` owns once and marks what it read delivered (one mark per
/// partition with rows): the marks applied.
async fn deliver_owned(store: &PostgresStore) -> u64 {
    let mut applied = 0;
    for fence in HOST.heartbeat(store).await.owned {
        let batch = store
            .read_partitions(&PartitionRead {
                fences: vec![fence],
                ..read_of(&[])
            })
            .await
            .expect("read");
        if batch.events.is_empty() {
            continue;
        }
        let report = mark_delivered(store, &batch).await;
        assert!(report.stale.is_empty(), "stale: {:?}", report.stale);
        applied += report.applied;
    }
    applied
}

/// A lease of `partitions` (epoch 1) spanning write times 1..=1000.
fn lease_of(partitions: &[u32]) -> Lease {
    Lease {
        app_code: APP.into(),
        worker_id: "h1".into(),
        lock_until_ms: now_ms() + 30_000,
        partitions: partitions
            .iter()
            .map(|&partition| PartitionBatch {
                fence: PartitionFence {
                    partition,
                    epoch: 1,
                },
                first_created_ms: 1,
                last_created_ms: 1_000,
                full: false,
            })
            .collect(),
        partition_count: PARTITIONS,
    }
}

/// The read of `partitions` (epoch 1) with per-room order.
fn read_of(partitions: &[u32]) -> PartitionRead {
    let fences = partitions
        .iter()
        .map(|&partition| PartitionFence {
            partition,
            epoch: 1,
        })
        .collect();
    HOST.read(fences, 500, now_ms(), true)
}

/// The generic plans of the reads and marks, made on an empty or small table as a fresh host's
/// sessions would, reach it through an index.
#[tokio::test]
async fn postgres_generic_plans_made_on_an_empty_table_read_through_an_index() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    db.store_default().await;
    let mut conn = PgConnection::connect(&db.url).await.expect("connect");
    sqlx::raw_sql(POSTGRES_SESSION_SETUP)
        .execute(&mut conn)
        .await
        .expect("session setup");
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .expect("force generic plans");
    let table = TableName::default();
    let ids: Vec<Mark> = (0..40).map(|i| Mark::delivered(format!("e{i}"))).collect();
    let mut statements = vec![
        (
            "read_one".to_string(),
            partition_read_statement(Backend::Postgres, &table, PARTITIONS, &read_of(&[3])),
        ),
        (
            "read_several".to_string(),
            partition_read_statement(
                Backend::Postgres,
                &table,
                PARTITIONS,
                &read_of(&[3, 4, 5, 9]),
            ),
        ),
    ];
    for (what, partitions) in [("one", &[3][..]), ("several", &[3, 4, 5, 9][..])] {
        for (name, bound) in mark_statements(
            Backend::Postgres,
            &table,
            &lease_of(partitions),
            &ids,
            MarkAt::first(now_ms()),
        ) {
            statements.push((format!("{name}_{what}"), bound));
        }
    }
    // The table as a fresh deployment's host may find it when its statements settle on generic
    // plans: empty and never analyzed, analyzed while empty (autovacuum's first pass), and
    // analyzed with a few rows (`ANALYZE` keeps the plans cached before it: a plan made now
    // stays once the rows arrive).
    let steps = [
        ("empty", None),
        ("empty, analyzed", Some(format!("ANALYZE {DEFAULT_TABLE}"))),
        (
            "300 rows, analyzed",
            Some(format!(
                "INSERT INTO {DEFAULT_TABLE} (app_code, event_id, event_type, room_id, envelope, \
                 created_at_ms, updated_at_ms) SELECT '{APP}', 'r' || n, 'T', 'room' || (n % 7), \
                 ''::bytea, n, n FROM generate_series(1, 300) AS n; ANALYZE {DEFAULT_TABLE}"
            )),
        ),
    ];
    for (state, setup) in steps {
        if let Some(sql) = setup {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
                .expect("set the table up");
        }
        for (name, statement) in &statements {
            let plan = generic_plan(&mut conn, name, statement).await;
            assert!(
                !plan.contains("Seq Scan"),
                "{name} ({state}): a sequential scan in the generic plan:\n{plan}\n{}",
                statement.sql
            );
            assert!(
                plan.contains(&format!("on {DEFAULT_TABLE}")) && plan.contains("Index"),
                "{name} ({state}): the outbox table is not read through an index:\n{plan}"
            );
        }
    }
    db.cleanup().await;
}

/// A fresh host's rounds on an empty table, then rows trickling in: its reads and marks run on
/// the plans the session cached; a large mark is not run on the cached plan.
#[tokio::test]
async fn postgres_sessions_run_reads_and_small_marks_on_cached_plans() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    // One connection, so every statement below runs in the session inspected.
    let options = outboxd::store::ConnectOptions {
        max_connections: 1,
        ..db.options(DEFAULT_TABLE)
    };
    let store = PostgresStore::connect(&options).await.expect("connect");
    store.migrate().await.expect("migrate");
    // Heartbeats and reads of an empty table, as a fresh host's first rounds do; then rows
    // trickle in one at a time and are read and marked.
    for round in 0..30 {
        if round >= 10 {
            let id = format!("e{round:03}");
            store
                .enqueue(&[record(APP, &id, "room1", now_ms())])
                .await
                .expect("enqueue");
        }
        let delivered = deliver_owned(&store).await;
        assert_eq!(delivered, u64::from(round >= 10), "round {round}");
    }
    let reads = executions(&store, "SELECT * FROM (SELECT c.event_id").await;
    let marks = executions(&store, &format!("UPDATE {DEFAULT_TABLE} SET")).await;
    assert!(
        reads.0 > 0 && marks.0 > 0,
        "reads (generic, custom) {reads:?} and marks {marks:?}: not on cached generic plans"
    );
    assert_eq!(
        marks.0 + marks.1,
        20,
        "one mark per row trickled in: {marks:?}"
    );

    // 100 rows of one room (one partition), read and marked at once: the mark is not run on the
    // session's prepared statement.
    let rows: Vec<_> = (0..100)
        .map(|i| record(APP, &format!("big{i:03}"), "room2", now_ms() + i))
        .collect();
    store.enqueue(&rows).await.expect("enqueue");
    let marked = deliver_owned(&store).await;
    assert_eq!(marked, 100);
    let after = executions(&store, &format!("UPDATE {DEFAULT_TABLE} SET")).await;
    assert_eq!(
        after, marks,
        "the 100-row mark ran on the prepared statement"
    );
    db.cleanup().await;
}
