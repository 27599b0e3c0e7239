//! What a backend store provides to the shared operations ([`Driver`]: its pool and statements),
//! a write transaction begun, and the retry of transactions and statements the database aborted
//! as transient ([`retry_transient`], [`run_retried`]).

use std::time::Duration;

use sqlx::Database;

use super::StoreError;
use super::session::Session;
use super::statement::Bound;
use super::statement::rows::Statements;
use crate::record;

/// What a backend store provides to the shared operations.
pub(crate) trait Driver: Send + Sync {
    /// The sqlx database; its connections run statements.
    type Db: Database<Connection: Session>;

    /// The connection pool.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    /// The store's statements (backend and table).
    fn statements(&self) -> &Statements;
}

/// Wraps a driver error with the operation it happened in.
pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    StoreError::db(op)
}

/// Begins a write transaction ([`super::statement::SqlDialect::begin_write`]).
pub(crate) async fn begin_write<D: Driver>(
    driver: &D,
    op: &'static str,
) -> Result<sqlx::Transaction<'static, D::Db>, StoreError> {
    match driver.statements().backend().dialect().begin_write() {
        Some(begin) => driver.pool().begin_with(begin).await,
        None => driver.pool().begin().await,
    }
    .map_err(db(op))
}

/// The least time a mark transaction the database aborted as transient is re-run before the
/// error is returned (wall clock, from the first attempt), even when its lease ends sooner.
pub(crate) const TRANSIENT_RETRY_BUDGET: Duration = Duration::from_secs(2);

/// Longest pause between two attempts.
const MAX_RETRY_PAUSE_MS: u64 = 200;

/// Runs `attempt` again while `retry_on` holds for its error ([`StoreError::is_transient`]:
/// deadlock victim, serialization failure, lock wait timeout, busy SQLite file; for a mark also
/// [`StoreError::is_unreachable`]) and wall-clock time `deadline_ms` is not reached: the database
/// rolled the whole attempt back, so repeating it is safe. With [`run_retried`], the only retry of
/// a database error (the store's module docs, "Who retries what").
pub(crate) async fn retry_transient<T, F, Fut>(
    deadline_ms: i64,
    retry_on: impl Fn(&StoreError) -> bool,
    mut attempt: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(err) if retry_on(&err) && pause(&mut tries, deadline_ms).await => {}
            result => return result,
        }
    }
}

/// Runs one autocommit statement on `session` (a heartbeat's, which holds its connection) again
/// while the database aborts it as transient, for at most [`TRANSIENT_RETRY_BUDGET`]: a renewal
/// of a host's leases locks many partition rows, which a mark's fence holds shared locks on in
/// another order (MySQL breaks the deadlock at once by rolling one back); a SQLite file is busy
/// while producers write. `statement` builds it for each attempt.
pub(crate) async fn run_retried<S: Session>(
    session: &mut S,
    op: &'static str,
    statement: impl Fn() -> Bound,
) -> Result<u64, StoreError> {
    let deadline_ms = record::now_ms() + TRANSIENT_RETRY_BUDGET.as_millis() as i64;
    let mut tries = 0;
    loop {
        match session.run(statement()).await.map_err(db(op)) {
            Err(err) if err.is_transient() && pause(&mut tries, deadline_ms).await => {}
            result => return result,
        }
    }
}

/// Sleeps before the next attempt of a statement or transaction aborted as transient (`tries`:
/// the pauses so far) a few random milliseconds growing with them, so that two writers that
/// deadlocked do not meet again; `false`, at once, when the pause would end past `deadline_ms`.
async fn pause(tries: &mut u64, deadline_ms: i64) -> bool {
    *tries += 1;
    let pause_ms = (rand::random_range(1..=10) * *tries).min(MAX_RETRY_PAUSE_MS);
    if record::now_ms().saturating_add(pause_ms as i64) >= deadline_ms {
        return false;
    }
    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    true
}
