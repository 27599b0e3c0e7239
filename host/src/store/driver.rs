//! What a backend store provides to the shared operations ([`Driver`]: its pool, its statements,
//! how it begins a write transaction), and the retry of transactions and statements the
//! database aborted as transient ([`retry_transient`], [`run_retried`]).

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

/// Runs a mark transaction again while `retry_on` holds for its error — the database
/// aborted it as transient (and, for marks, the database cannot be reached)
/// ([`StoreError::is_transient`]: deadlock victim, serialization failure, lock wait timeout, busy
/// SQLite file) and wall-clock time `deadline_ms` is not reached: the whole transaction was rolled
/// back, so repeating it is safe. A mark's fence holds a shared lock on its partitions' rows,
/// which a heartbeat's renewal locks in another order (MySQL breaks the deadlock by rolling one
/// back).
///
/// This and [`run_retried`] (one statement on a held connection) are the only places that retry a
/// database error: the worker never retries a store call (see the store's module docs, "Who
/// retries what").
pub(crate) async fn retry_transient<T, F, Fut>(
    deadline_ms: i64,
    retry_on: impl Fn(&StoreError) -> bool,
    mut attempt: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut tries: u64 = 1;
    loop {
        match attempt().await {
            Err(err) if retry_on(&err) => match pause_before_retry(tries, deadline_ms) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    tries += 1;
                }
                None => return Err(err),
            },
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
    let mut tries: u64 = 1;
    loop {
        match session.run(statement()).await.map_err(db(op)) {
            Err(err) if err.is_transient() => match pause_before_retry(tries, deadline_ms) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    tries += 1;
                }
                None => return Err(err),
            },
            result => return result,
        }
    }
}

/// The pause before attempt `tries + 1` of a statement or transaction aborted as transient: a
/// few random milliseconds growing with the attempts, so that two writers that deadlocked do not
/// meet again; `None` once it would end past `deadline_ms` (wall clock).
fn pause_before_retry(tries: u64, deadline_ms: i64) -> Option<Duration> {
    let pause_ms = (rand::random_range(1..=10) * tries).min(MAX_RETRY_PAUSE_MS);
    (record::now_ms().saturating_add(pause_ms as i64) < deadline_ms)
        .then(|| Duration::from_millis(pause_ms))
}
