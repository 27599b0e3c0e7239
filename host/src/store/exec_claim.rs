//! The claim, written once for every backend over the shared executor ([`super::exec`]): the
//! claim branches read in order in one write transaction, each branch's rows leased, rejected rows
//! failed, and where the store keeps one (PostgreSQL, MariaDB) the tenant's claim position
//! ([`super::claim_position`]) read and remembered. The steps a database does its own way are
//! [`ClaimOps`]' methods: their default bodies are the SELECT-then-lease claim (SQLite, MariaDB);
//! PostgreSQL's one-statement claim overrides them in `store/postgres/claim/`.

use std::time::{Duration, Instant};

use super::claim_position::{ClaimPosition, ClaimPositions, PendingStart};
use super::driver::{CLAIM_RETRY_BUDGET, Driver, begin_write, db, retry_transient};
use super::judge::judge;
use super::row::CandidateRow;
use super::session::Session;
use super::statement::claim::{ClaimBranch, PositionSide, lease_rows, reject_rows};
use super::statement::{Bound, MAX_ROWS_PER_STATEMENT};
use crate::record;
use crate::store::{ClaimBatch, ClaimParams, DeliveryOrder, Lease, RejectedRow, StoreError};

/// The steps of a claim that a database may do its own way; the default bodies are the claim
/// that SELECTs its rows `FOR UPDATE SKIP LOCKED` (SQLite: in `BEGIN IMMEDIATE`) and leases them
/// by primary key in a second statement.
pub(crate) trait ClaimOps: Driver + Sized {
    /// Begins the claim's transaction: a write transaction ([`begin_write`]).
    async fn begin_claim(&self) -> Result<sqlx::Transaction<'static, Self::Db>, StoreError> {
        begin_write(self, "claim").await
    }

    /// The rows of one claim statement, in the branch's order.
    async fn claimed_rows<S: Session>(
        &self,
        session: &mut S,
        query: Bound,
    ) -> Result<Vec<CandidateRow>, sqlx::Error> {
        session.rows::<CandidateRow>(query).await
    }

    /// The rows of one room-heads statement (the pending branch of a per-room claim), in the
    /// branch's order: like [`ClaimOps::claimed_rows`] by default.
    async fn room_heads_rows<S: Session>(
        &self,
        session: &mut S,
        query: Bound,
    ) -> Result<Vec<CandidateRow>, sqlx::Error> {
        self.claimed_rows(session, query).await
    }

    /// The writes after the reads: the lease UPDATE of the rows handed out, then the rejected
    /// rows failed.
    async fn lease_and_reject<S: Session>(
        &self,
        session: &mut S,
        params: &ClaimParams,
        batch: &ClaimBatch,
    ) -> Result<(), StoreError> {
        const OP: &str = "claim";
        let statements = self.statements();
        let (backend, table) = (statements.backend(), statements.table());
        let leased: Vec<&str> = batch
            .events
            .iter()
            .map(|e| e.event.event_id.as_str())
            .collect();
        for ids in leased.chunks(MAX_ROWS_PER_STATEMENT) {
            let lease = lease_rows(backend, table, &batch.lease, params.now_ms, ids);
            session.run(lease).await.map_err(db(OP))?;
        }
        fail_rejected(session, self, params, &batch.rejected, OP).await
    }
}

/// Reads the claim branches in order (each up to the rows still wanted; rejected rows count),
/// leases the rows handed out in one UPDATE and fails the rejected ones, in one transaction
/// (repeated when the database picks it as a deadlock victim: [`retry_transient`]).
pub(crate) async fn claim<D: ClaimOps>(
    driver: &D,
    params: &ClaimParams,
) -> Result<ClaimBatch, StoreError> {
    claim_branches(driver, params, &ClaimBranch::ALL).await
}

/// Leases expired leases alone (the claim's last branch, each reclaim an attempt, a lease at
/// `max_attempts` failed), leaving pending and retryable rows to the held claims of a held-mode
/// worker: [`crate::store::OutboxStore::reclaim_expired`].
pub(crate) async fn reclaim_expired<D: ClaimOps>(
    driver: &D,
    params: &ClaimParams,
) -> Result<ClaimBatch, StoreError> {
    claim_branches(driver, params, &[ClaimBranch::ExpiredLease]).await
}

/// A claim reading `branches` (in claim order), repeated when the database picks it as a
/// deadlock victim.
async fn claim_branches<D: ClaimOps>(
    driver: &D,
    params: &ClaimParams,
    branches: &[ClaimBranch],
) -> Result<ClaimBatch, StoreError> {
    let deadline_ms = record::now_ms() + CLAIM_RETRY_BUDGET.as_millis() as i64;
    retry_transient(deadline_ms, StoreError::is_transient, || {
        claim_once(driver, params, branches)
    })
    .await
}

/// A claim that takes at least this long logs, at debug level, where its time went (`outboxd
/// bench --rate` with `RUST_LOG=outboxd::store::exec_claim=debug`).
const SLOW_CLAIM: Duration = Duration::from_millis(10);

/// Logs a slow claim's steps at debug level: begin, the reads (and leases where the dialect
/// leases in them), the separate lease / reject writes, the commit.
fn log_if_slow(steps: [Instant; 5], rows: usize) {
    let took = steps[4] - steps[0];
    if took < SLOW_CLAIM {
        return;
    }
    let ms = |i: usize| (steps[i + 1] - steps[i]).as_secs_f64() * 1000.0;
    tracing::debug!(
        took_ms = took.as_secs_f64() * 1000.0,
        begin_ms = ms(0),
        read_ms = ms(1),
        write_ms = ms(2),
        commit_ms = ms(3),
        rows,
        "slow claim"
    );
}

/// One attempt of [`claim_branches`].
async fn claim_once<D: ClaimOps>(
    driver: &D,
    params: &ClaimParams,
    branches: &[ClaimBranch],
) -> Result<ClaimBatch, StoreError> {
    const OP: &str = "claim";
    let mut batch = ClaimBatch {
        lease: Lease {
            app_code: params.app_code.clone(),
            worker_id: params.worker_id.clone(),
            lock_until_ms: params.now_ms.saturating_add(params.lease_ms),
            partition: None,
        },
        events: Vec::new(),
        rejected: Vec::new(),
    };
    if params.limit == 0 {
        return Ok(batch);
    }
    let mut steps = [Instant::now(); 5];
    let mut tx = driver.begin_claim().await?;
    steps[1] = Instant::now();
    let positions = driver.positions();
    let reads = read_branches(&mut *tx, driver, positions, params, branches, &mut batch).await?;
    steps[2] = Instant::now();
    driver.lease_and_reject(&mut *tx, params, &batch).await?;
    steps[3] = Instant::now();
    tx.commit().await.map_err(db(OP))?;
    steps[4] = Instant::now();
    log_if_slow(steps, batch.events.len() + batch.rejected.len());
    // Remembered only once the claim is committed: a rolled-back claim's rows are pending again,
    // below where it read.
    if let Some(last_room) = reads.last_room {
        driver.room_cursors().record(&params.app_code, last_room);
    }
    if let (Some(positions), Some(read)) = (positions, reads.pending) {
        positions.record(
            &params.app_code,
            params.now_ms,
            &read.started,
            read.full,
            read.last,
        );
    }
    Ok(batch)
}

/// Where a claim's pending branch read, to be remembered once the claim commits.
#[derive(Default)]
struct Reads {
    /// From the claim position (no ordering, where the store keeps positions).
    pending: Option<PendingRead>,
    /// The room of the last head a per-room claim read (`Some(None)`: it read none).
    last_room: Option<Option<String>>,
}

/// Reads `branches` in order into `batch` (each up to the rows still wanted; rejected rows
/// count), judging every row. With `positions`, the pending branch (without ordering) reads from
/// the tenant's claim position ([`pending_from_position`]); with per-room ordering it reads room
/// heads from the room cursor ([`room_heads`]). Where they read is returned.
async fn read_branches<D: ClaimOps, S: Session>(
    session: &mut S,
    driver: &D,
    positions: Option<&ClaimPositions>,
    params: &ClaimParams,
    branches: &[ClaimBranch],
    batch: &mut ClaimBatch,
) -> Result<Reads, StoreError> {
    const OP: &str = "claim";
    let limit = params.limit as usize;
    let mut taken = 0;
    let mut reads = Reads::default();
    for &branch in branches {
        let remaining = limit - taken;
        if remaining == 0 {
            break;
        }
        let per_room_pending =
            branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::PerRoom;
        let rows = match positions {
            _ if per_room_pending => {
                let (rows, last_room) =
                    room_heads(session, driver, params, &batch.lease, remaining).await?;
                reads.last_room = Some(last_room);
                rows
            }
            Some(positions)
                if branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::None =>
            {
                let start = positions.start(&params.app_code, params.now_ms);
                let (rows, pending) =
                    pending_from_position(session, driver, start, params, &batch.lease, remaining)
                        .await?;
                reads.pending = Some(pending);
                rows
            }
            _ => branch_rows(session, driver, branch, params, &batch.lease, remaining)
                .await
                .map_err(db(OP))?,
        };
        taken += rows.len();
        for row in rows {
            match judge(&params.app_code, row, branch, params.max_attempts) {
                Ok(event) => batch.events.push(event),
                Err(rejected) => batch.rejected.push(rejected),
            }
        }
        if skips_due_after(branch, params, taken) {
            break;
        }
    }
    Ok(reads)
}

/// The pending branch of a per-room claim: up to `limit` room heads from the tenant's room
/// cursor on ([`crate::store::room_cursor`]), then, when the rooms after the cursor come back
/// short, from the rooms up to it; and the room of the last head read (the next cursor).
async fn room_heads<D: ClaimOps, S: Session>(
    session: &mut S,
    driver: &D,
    params: &ClaimParams,
    lease: &Lease,
    limit: usize,
) -> Result<(Vec<CandidateRow>, Option<String>), StoreError> {
    let statements = driver.statements();
    let mut walk = Some(driver.room_cursors().start(&params.app_code));
    let (mut rows, mut last_room) = (Vec::new(), None);
    while let Some(rooms) = walk.take() {
        let wanted = limit - rows.len();
        let query = statements.claim_statement_by_room(params, lease, &rooms, wanted);
        let read = driver
            .room_heads_rows(session, query)
            .await
            .map_err(db("claim"))?;
        if let Some(row) = read.last() {
            last_room = Some(row.room_id.clone());
        }
        walk = rooms.then(read.len(), wanted);
        rows.extend(read);
    }
    Ok((rows, last_room))
}

/// Fails the rows a claim without a lease on them rejected (`worker_id` keeps the last worker
/// that held each row), in statements of at most [`MAX_ROWS_PER_STATEMENT`] rows: the leased
/// claim that leases after its SELECT ([`ClaimOps::lease_and_reject`]), and the held claim.
pub(crate) async fn fail_rejected<S: Session, D: Driver>(
    session: &mut S,
    driver: &D,
    params: &ClaimParams,
    rejected: &[RejectedRow],
    op: &'static str,
) -> Result<(), StoreError> {
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    for chunk in rejected.chunks(MAX_ROWS_PER_STATEMENT) {
        let reject = reject_rows(backend, table, &params.app_code, params.now_ms, chunk);
        session.run(reject).await.map_err(db(op))?;
    }
    Ok(())
}

/// Whether a claim stops after `branch`, having taken `taken` rows so far: after the pending
/// branch handed out rows, unless the claim asks for the due branches ([`ClaimParams::scan_due`]).
fn skips_due_after(branch: ClaimBranch, params: &ClaimParams, taken: usize) -> bool {
    branch == ClaimBranch::Pending && taken > 0 && !params.scan_due
}

/// What a claim's pending branch read: where it started, whether it filled what it asked for,
/// and the last row it read from there.
struct PendingRead {
    started: PendingStart,
    full: bool,
    last: Option<ClaimPosition>,
}

/// The pending branch (no ordering) from `start`, up to `limit` rows. A read after a claim
/// position that comes back short reads the rows up to the position too, in the same transaction,
/// and hands those (older) rows out first: a claim never comes back short while older pending
/// rows wait below the position.
async fn pending_from_position<D: ClaimOps, S: Session>(
    session: &mut S,
    driver: &D,
    start: PendingStart,
    params: &ClaimParams,
    lease: &Lease,
    limit: usize,
) -> Result<(Vec<CandidateRow>, PendingRead), StoreError> {
    const OP: &str = "claim";
    let statements = driver.statements();
    let by_position = |position, side, limit| {
        statements.claim_statement_by_position(params, lease, position, side, limit)
    };
    let mut rows = match &start {
        PendingStart::Head => {
            let pending = ClaimBranch::Pending;
            branch_rows(session, driver, pending, params, lease, limit).await
        }
        PendingStart::After(position) => {
            let query = by_position(position, PositionSide::After, limit);
            driver.claimed_rows(session, query).await
        }
    }
    .map_err(db(OP))?;
    let full = rows.len() == limit;
    let last = rows.last().map(|row| ClaimPosition {
        created_at_ms: row.created_at_ms,
        event_id: row.event_id.clone(),
    });
    if let (PendingStart::After(position), false) = (&start, full) {
        let query = by_position(position, PositionSide::UpTo, limit - rows.len());
        let mut older = driver.claimed_rows(session, query).await.map_err(db(OP))?;
        older.append(&mut rows);
        rows = older;
    }
    let read = PendingRead {
        started: start,
        full,
        last,
    };
    Ok((rows, read))
}

/// The rows of one claim branch read from its head, in the branch's order: leased in the same
/// statement where the store claims so ([`ClaimOps::lease_and_reject`] leases them otherwise).
async fn branch_rows<D: ClaimOps, S: Session>(
    session: &mut S,
    driver: &D,
    branch: ClaimBranch,
    params: &ClaimParams,
    lease: &Lease,
    limit: usize,
) -> Result<Vec<CandidateRow>, sqlx::Error> {
    let statements = driver.statements();
    let query = statements
        .claim_lease_query(branch, params, lease, limit)
        .unwrap_or_else(|| statements.claim_query(branch, params, limit));
    driver.claimed_rows(session, query).await
}
