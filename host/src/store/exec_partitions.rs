//! Partition ownership, written once for every backend over a pooled connection: the heartbeat
//! that keeps a host's partitions and takes its fair share ([`rebalance`]), and owned partitions'
//! due rows read without writing them ([`read_partitions`]). The statements are in
//! `statement/partitions.rs`; the types in `partitions.rs`.

use std::collections::BTreeMap;

use super::driver::{Driver, db, run_retried};
use super::judge::judge;
use super::row::{CandidateRow, Columns, EventId, FromColumns, Int, Name};
use super::schema::{checked_partitions, explain_failure};
use super::session::Session;
use super::statement::partitions as sql;
use super::statement::rows::reject_rows;
use super::statement::{MAX_ROWS_PER_STATEMENT, SqlBuilder};
use crate::record::Status;
use crate::store::{
    Careful, ClaimBatch, Lease, Ownership, PartitionBatch, PartitionFence, PartitionRead,
    RebalanceParams, RejectedRow, StoreError,
};

/// How many lease periods a host row is kept after its host stopped renewing it.
const FORGET_HOSTS_AFTER_LEASES: i64 = 10;

/// One row of `<table>_partitions` and the database's clock.
struct PartitionRow {
    partition: u32,
    owner: Option<String>,
    epoch: i64,
    lease_until_ms: i64,
    now_ms: i64,
    careful: Careful,
}

impl FromColumns for PartitionRow {
    fn from_columns(row: &dyn Columns) -> Result<PartitionRow, sqlx::Error> {
        Ok(PartitionRow {
            partition: u32::try_from(row.int32(0)?).unwrap_or(0),
            owner: row.opt_text(1)?,
            epoch: row.int(2)?,
            lease_until_ms: row.int(3)?,
            now_ms: row.int(4)?,
            careful: Careful {
                size: u32::try_from(row.int32(5)?).unwrap_or(0),
                left: u32::try_from(row.int32(6)?).unwrap_or(0),
                suspect: row.opt_text(7)?,
            },
        })
    }
}

/// A read row, its status and its partition.
struct ReadRow {
    candidate: CandidateRow,
    status: String,
    partition: i64,
}

impl FromColumns for ReadRow {
    fn from_columns(row: &dyn Columns) -> Result<ReadRow, sqlx::Error> {
        Ok(ReadRow {
            candidate: CandidateRow::from_columns(row)?,
            status: row.text(6)?,
            partition: row.int(7)?,
        })
    }
}

/// This host's fair share of `partitions` among `hosts` live hosts, it being the `rank`-th by id:
/// `partitions / hosts`, one more for the first `partitions % hosts` hosts. A host not in the
/// list yet (`rank >= hosts`) gets the share of the last.
pub(crate) fn fair_share(partitions: u32, hosts: usize, rank: usize) -> u32 {
    let hosts = hosts.max(1) as u32;
    let rank = (rank as u32).min(hosts - 1);
    partitions / hosts + u32::from(rank < partitions % hosts)
}

/// One heartbeat of a host for a tenant: the host's row renewed (or created), hosts long gone
/// forgotten, its partitions renewed and those in `params.release` given up, then free or
/// expired partitions taken up to its fair share. Every lease counts on the database's clock.
/// A host owning more than its share keeps it: the caller releases the excess once its batches
/// are marked (the next call's `release`). Leaving: every partition released, the host row gone.
pub(crate) async fn rebalance<D: Driver>(
    driver: &D,
    params: &RebalanceParams<'_>,
) -> Result<Ownership, StoreError> {
    const OP: &str = "rebalance";
    let statements = driver.statements();
    let (app_code, host_id, now_ms) = (params.app_code, params.host_id, params.now_ms);
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    if params.leaving {
        run_retried(&mut *conn, OP, || {
            sql::release_partitions(statements, app_code, host_id, None)
        })
        .await?;
        run_retried(&mut *conn, OP, || {
            sql::delete_hosts(statements, app_code, Some(host_id), 0, now_ms)
        })
        .await?;
        return Ok(Ownership {
            partitions: statements.partitions(),
            ..Ownership::default()
        });
    }
    // Before anything is renewed or taken: a host whose table changed its partition count
    // under it keeps none of its partitions (they run out within a lease).
    let partitions = checked_partitions(&mut *conn, statements).await?;
    match own_partitions(&mut *conn, driver, params, partitions).await {
        Ok(ownership) => Ok(ownership),
        // The count may have changed since it was checked (`migrate --partitions` swapping the
        // partition column): said so, rather than as the missing column.
        Err(e) => Err(explain_failure(&mut *conn, statements, partitions, e).await),
    }
}

/// The part of a heartbeat after the count check: renew, forget, release, take the share.
async fn own_partitions<D: Driver, S: Session>(
    conn: &mut S,
    driver: &D,
    params: &RebalanceParams<'_>,
    partitions: u32,
) -> Result<Ownership, StoreError> {
    const OP: &str = "rebalance";
    let statements = driver.statements();
    let host = sql::HostLease {
        app_code: params.app_code,
        host_id: params.host_id,
        lease_ms: params.lease_ms,
        now_ms: params.now_ms,
    };
    let (app_code, host_id, lease_ms, now_ms) =
        (host.app_code, host.host_id, host.lease_ms, host.now_ms);
    if run_retried(conn, OP, || sql::renew_host(statements, &host)).await? == 0 {
        run_retried(conn, OP, || sql::insert_host(statements, &host)).await?;
    }
    let forget_after = lease_ms.saturating_mul(FORGET_HOSTS_AFTER_LEASES);
    run_retried(conn, OP, || {
        sql::delete_hosts(statements, app_code, None, forget_after, now_ms)
    })
    .await?;
    run_retried(conn, OP, || sql::renew_partitions(statements, &host)).await?;
    if !params.release.is_empty() {
        run_retried(conn, OP, || {
            sql::release_partitions(statements, app_code, host_id, Some(params.release))
        })
        .await?;
    }
    let mut rows = conn
        .rows::<PartitionRow>(sql::partition_leases(statements, app_code, now_ms))
        .await
        .map_err(db(OP))?;
    rows.retain(|row| row.partition < partitions);
    if rows.len() < partitions as usize {
        run_retried(conn, OP, || {
            sql::seed_partitions(statements, app_code, partitions)
        })
        .await?;
        rows = conn
            .rows::<PartitionRow>(sql::partition_leases(statements, app_code, now_ms))
            .await
            .map_err(db(OP))?;
        rows.retain(|row| row.partition < partitions);
    }
    let hosts = conn
        .rows::<Name>(sql::live_hosts(statements, app_code, now_ms))
        .await
        .map_err(db(OP))?;
    let rank = hosts
        .iter()
        .position(|Name(id)| id == host_id)
        .unwrap_or(hosts.len());
    let share = fair_share(partitions, hosts.len(), rank);
    let mut owned: Vec<PartitionFence> = rows
        .iter()
        .filter(|row| row.owner.as_deref() == Some(host_id))
        .map(|row| PartitionFence {
            partition: row.partition,
            epoch: row.epoch,
        })
        .collect();
    let mut wanted = (share as usize).saturating_sub(owned.len());
    let mut taken_careful = Vec::new();
    // Free partitions first, then expired ones; a host's rank spreads where each starts, so
    // hosts joining together do not all race for the same partitions.
    let start = rank * partitions as usize / hosts.len().max(1);
    let mut candidates: Vec<&PartitionRow> = rows
        .iter()
        .filter(|row| {
            row.owner.as_deref() != Some(host_id)
                && (row.owner.is_none() || row.lease_until_ms < row.now_ms)
                && !params.release.contains(&row.partition)
        })
        .collect();
    candidates.sort_by_key(|row| {
        (
            row.owner.is_some(),
            (row.partition as usize + partitions as usize - start % partitions as usize)
                % partitions as usize,
        )
    });
    // A take another host won (it read the same free partition) is not counted: the next
    // candidate is tried, so hosts joining together leave no partition unowned (each stops only
    // at its share, and their shares add up to every partition).
    for row in candidates {
        if wanted == 0 {
            break;
        }
        // Its last owner's lease ran out (it died, or was paused or cut off): the crash guard.
        let careful = row
            .careful
            .after_takeover(row.owner.is_some(), params.careful_rows);
        let take = || sql::take_partition(statements, &host, (row.partition, row.epoch), &careful);
        if run_retried(conn, OP, take).await? == 1 {
            owned.push(PartitionFence {
                partition: row.partition,
                epoch: row.epoch + 1,
            });
            if careful.active() {
                taken_careful.push((row.partition, careful));
            }
            wanted -= 1;
        }
    }
    owned.sort();
    let leased_hosts_active = !conn
        .rows::<EventId>(sql::live_leases(statements, app_code, partitions, now_ms))
        .await
        .map_err(db(OP))?
        .is_empty();
    Ok(Ownership {
        owned,
        share,
        hosts: hosts.len().max(1) as u32,
        partitions,
        leased_hosts_active,
        careful: taken_careful,
    })
}

/// Writes the crash guard's state of a partition `host_id` owns, fenced on its epoch: whether it
/// still owned it.
pub(crate) async fn set_careful<D: Driver>(
    driver: &D,
    (app_code, host_id): (&str, &str),
    fence: &PartitionFence,
    careful: &Careful,
) -> Result<bool, StoreError> {
    const OP: &str = "crash guard";
    let statements = driver.statements();
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let set = sql::set_careful(statements, (app_code, host_id), fence, careful);
    Ok(conn.run(set).await.map_err(db(OP))? == 1)
}

/// Moves live rows of a partition `host_id` owns to `failed` with their reasons, fenced as a
/// mark is: the rows changed (none once the partition was taken over).
pub(crate) async fn reject<D: Driver>(
    driver: &D,
    (app_code, host_id): (&str, &str),
    fence: &PartitionFence,
    now_ms: i64,
    rows: &[RejectedRow],
) -> Result<u64, StoreError> {
    const OP: &str = "reject";
    let statements = driver.statements();
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let mut changed = 0;
    for chunk in rows.chunks(MAX_ROWS_PER_STATEMENT) {
        let reject = reject_rows(statements, app_code, (host_id, fence), now_ms, chunk);
        changed += conn.run(reject).await.map_err(db(OP))?;
    }
    Ok(changed)
}

/// The partitions of `app_code` holding live rows, by the dialect's skip scan; `None` where the
/// tenant has one partition (SQLite: read it).
pub(crate) async fn live_partitions<D: Driver>(
    driver: &D,
    app_code: &str,
) -> Result<Option<Vec<u32>>, StoreError> {
    const OP: &str = "live partitions";
    let statements = driver.statements();
    let (table, partitions) = (statements.table(), statements.partitions());
    let mut b = SqlBuilder::new(statements.backend());
    if !b
        .dialect()
        .write_live_partitions(&mut b, table, app_code, partitions)
    {
        return Ok(None);
    }
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let rows = conn.rows::<Int>(b.finish()).await.map_err(db(OP))?;
    Ok(Some(
        rows.into_iter()
            .filter_map(|Int(p)| u32::try_from(p).ok())
            .collect(),
    ))
}

/// Reads owned partitions' due rows in one statement ([`sql::read_partitions`]), the first
/// `limit` by write order but those `in_flight`, each row judged; one that does not decode goes to `failed` (the only
/// write). The batch's [`Lease`] fences its marks on each partition's owner and epoch.
pub(crate) async fn read_partitions<D: Driver>(
    driver: &D,
    read: &PartitionRead,
) -> Result<ClaimBatch, StoreError> {
    const OP: &str = "read partitions";
    let statements = driver.statements();
    let mut batch = ClaimBatch {
        lease: Lease {
            app_code: read.app_code.clone(),
            worker_id: read.host_id.clone(),
            lock_until_ms: read.now_ms.saturating_add(read.lease_ms),
            partitions: Vec::new(),
            partition_count: statements.partitions(),
        },
        events: Vec::new(),
        rejected: Vec::new(),
    };
    if read.limit == 0 || read.fences.is_empty() {
        return Ok(batch);
    }
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let mut rows = conn
        .rows::<ReadRow>(sql::read_partitions(statements, read))
        .await
        .map_err(db(OP))?;
    // The rows in flight left out (the statement read as many more); then the first `limit` of
    // all the partitions' branches by write order: each partition's rows a prefix of its due
    // rows. More than `limit`: the read was cut.
    rows.retain(|r| !read.in_flight.contains(&r.candidate.event_id));
    rows.sort_by(|a, b| {
        (a.candidate.created_at_ms, &a.candidate.event_id)
            .cmp(&(b.candidate.created_at_ms, &b.candidate.event_id))
    });
    let cut = rows.len() >= read.limit as usize;
    rows.truncate(read.limit as usize);
    let mut by_partition: BTreeMap<i64, Vec<ReadRow>> = BTreeMap::new();
    for row in rows {
        by_partition.entry(row.partition).or_default().push(row);
    }
    let mut rejected: Vec<(PartitionFence, Vec<RejectedRow>)> = Vec::new();
    for fence in &read.fences {
        let Some(rows) = by_partition.remove(&i64::from(fence.partition)) else {
            continue;
        };
        let mut span: Option<(i64, i64)> = None;
        let mut refused = Vec::new();
        for row in rows {
            let reclaimed = row.status == Status::Delivering.as_str();
            match judge(&read.app_code, row.candidate, reclaimed, read.max_attempts) {
                Ok(event) => {
                    let at = event.created_at_ms;
                    span = Some(span.map_or((at, at), |(first, _)| (first, at)));
                    batch.events.push(event);
                }
                Err(row) => refused.push(row),
            }
        }
        if !refused.is_empty() {
            rejected.push((*fence, refused));
        }
        if let Some((first_created_ms, last_created_ms)) = span {
            batch.lease.partitions.push(PartitionBatch {
                fence: *fence,
                first_created_ms,
                last_created_ms,
                full: cut,
            });
        }
    }
    // One partition's rows are in write order; several partitions' are merged by it.
    if batch.lease.partitions.len() > 1 {
        batch.events.sort_by(|a, b| {
            (a.created_at_ms, &a.event.event_id).cmp(&(b.created_at_ms, &b.event.event_id))
        });
    }
    // Rows that do not decode go to `failed` at once, fenced on their partition: a host that lost
    // it changes nothing and reports none (the new owner rejects them).
    for (fence, rows) in rejected {
        for chunk in rows.chunks(MAX_ROWS_PER_STATEMENT) {
            let fence = (read.host_id.as_str(), &fence);
            let reject = reject_rows(statements, &read.app_code, fence, read.now_ms, chunk);
            if conn.run(reject).await.map_err(db(OP))? == chunk.len() as u64 {
                batch.rejected.extend_from_slice(chunk);
            }
        }
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::fair_share;

    #[test]
    fn shares_add_up_to_every_partition() {
        for hosts in 1..=70 {
            let total: u32 = (0..hosts).map(|rank| fair_share(64, hosts, rank)).sum();
            assert_eq!(total, 64, "{hosts} hosts");
        }
        assert_eq!(fair_share(64, 3, 0), 22);
        assert_eq!(fair_share(64, 3, 2), 21);
        assert_eq!(fair_share(1, 2, 1), 0);
        assert_eq!(fair_share(64, 0, 0), 64);
    }
}
