//! PostgreSQL's busy claim is one statement in autocommit: a claim that reads only the pending
//! branch from the head runs its `UPDATE … RETURNING` on a session with `synchronous_commit =
//! off`, with no `BEGIN` / `COMMIT` around it (one round trip instead of three), while marks stay
//! on sessions that wait for the WAL flush.
//!
//! What the server saw is read from `pg_stat_activity`: a session's `query` is the last
//! statement it ran, and `state` says whether a transaction is still open.

mod support;

use std::sync::Arc;

use outboxd::record::now_ms;
use outboxd::store::{ClaimParams, DeliveryOrder, Mark, MarkParams, OutboxStore};
use support::{Backend, TestDb, record};

fn busy_claim(now_ms: i64) -> ClaimParams {
    ClaimParams {
        app_code: "app".into(),
        worker_id: "w1".into(),
        limit: 10,
        lease_ms: 60_000,
        now_ms,
        max_attempts: 5,
        ordering: DeliveryOrder::None,
        scan_due: false,
    }
}

/// `(query, state)` of the other sessions of this database whose last statement starts with
/// `prefix`.
async fn sessions_whose_last_statement_starts_with(
    pool: &sqlx::PgPool,
    prefix: &str,
) -> Vec<(String, String)> {
    sqlx::query_as::<_, (String, String)>(
        "SELECT query, state FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND query LIKE $1 || '%'",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
    .expect("pg_stat_activity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_claim_is_one_statement_in_autocommit() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store: Arc<dyn OutboxStore> = db.store_default().await;
    let now = now_ms();
    store
        .enqueue(&[
            record("app", "e1", "r1", now),
            record("app", "e2", "r2", now + 1),
        ])
        .await
        .expect("enqueue");
    let support::RawPool::Postgres(pool) = &db.pool else {
        unreachable!("a PostgreSQL test database")
    };
    let batch = store.claim(&busy_claim(now)).await.expect("claim");
    assert_eq!(batch.events.len(), 2);
    let claims = sessions_whose_last_statement_starts_with(pool, "UPDATE").await;
    assert_eq!(
        claims.len(),
        1,
        "one session's last statement is the claim's UPDATE, not a COMMIT after it: {claims:?}"
    );
    assert_eq!(claims[0].1, "idle", "no transaction left open: {claims:?}");

    // The mark runs on the other pool: its session is not the claim's.
    let marks: Vec<Mark> = batch
        .events
        .iter()
        .map(|e| Mark::delivered(e.event.event_id.clone()))
        .collect();
    let report = store
        .mark(&MarkParams {
            lease: &batch.lease,
            marks: &marks,
            now_ms: now,
        })
        .await
        .expect("mark");
    assert_eq!(report.applied, 2);
    let updates = sessions_whose_last_statement_starts_with(pool, "UPDATE").await;
    assert_eq!(
        updates.len(),
        2,
        "claim and mark on two sessions: {updates:?}"
    );
    db.cleanup().await;
}
