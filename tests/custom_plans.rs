//! PostgreSQL plans every read and mark for its own execution (`plan_cache_mode =
//! force_custom_plan` on the store's sessions): no prepared statement may settle on a generic
//! plan made while the table was empty. That happened on a fresh deployment (`migrate`, then the
//! host starts before the first rows arrive): after five executions PostgreSQL switched the
//! prepared statements to generic plans, kept them for the connection's life, and every read and
//! mark slowed down as the table filled (commit → delivered p50 11–14 ms instead of
//! ~3 ms at 2,000 rows/s; the git history of docs/PERFORMANCE.md, "Generic plans on a table that starts empty").
//! `pg_prepared_statements` counts, per session, how often each statement ran on which plan.

use crate::support;

use outboxd::record::now_ms;
use outboxd::store::postgres::PostgresStore;
use outboxd::store::{Backend, Mark, MarkParams, OutboxStore, PartitionRead, RebalanceParams};
use support::{TestDb, record};

const APP: &str = "app_a";

#[tokio::test]
async fn postgres_sessions_plan_every_read_and_mark_for_its_execution() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    // One connection, so every statement below runs in the session inspected at the end.
    let options = outboxd::store::ConnectOptions {
        max_connections: 1,
        ..db.options(outboxd::store::DEFAULT_TABLE)
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
        let ownership = store
            .rebalance(&RebalanceParams {
                app_code: APP,
                host_id: "h1",
                lease_ms: 30_000,
                release: &[],
                leaving: false,
                careful_rows: 100,
                now_ms: now_ms(),
            })
            .await
            .expect("rebalance");
        let mut read = 0;
        for fence in ownership.owned {
            let batch = store
                .read_partitions(&PartitionRead {
                    app_code: APP.into(),
                    host_id: "h1".into(),
                    fences: vec![fence],
                    limit: 500,
                    now_ms: now_ms(),
                    lease_ms: 30_000,
                    max_attempts: 5,
                    per_room: false,
                })
                .await
                .expect("read");
            read += batch.events.len();
            let marks: Vec<Mark> = batch
                .events
                .iter()
                .map(|e| Mark::delivered(e.event.event_id.clone()))
                .collect();
            if !marks.is_empty() {
                let report = store
                    .mark(&MarkParams {
                        lease: &batch.lease,
                        marks: &marks,
                        now_ms: now_ms(),
                    })
                    .await
                    .expect("mark");
                assert_eq!(report.applied, 1);
            }
        }
        if round >= 10 {
            assert_eq!(read, 1, "round {round}");
        }
    }
    // Statements with parameters: one without any has nothing to plan for, and PostgreSQL
    // always runs it on its one (generic) plan.
    let (statements, generic, custom): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(generic_plans), 0)::bigint, \
         coalesce(sum(custom_plans), 0)::bigint FROM pg_prepared_statements \
         WHERE cardinality(parameter_types) > 0",
    )
    .fetch_one(store.pool())
    .await
    .expect("read pg_prepared_statements");
    assert!(
        statements > 0 && custom > 0,
        "the session prepared no statement ({statements}) or planned none ({custom})"
    );
    assert_eq!(
        generic, 0,
        "{generic} executions ran on a generic plan ({custom} on custom plans, {statements} \
         prepared statements)"
    );
    db.cleanup().await;
}
