//! The statements of partition ownership: a host's heartbeat, the partitions' leases (taken,
//! renewed, released, all on the database's clock), and owned partitions' due rows read without
//! writing them. The mark's fence on a partition is in `mark.rs` ([`super::mark::lease_fence`]).

use std::borrow::Cow;

use super::rows::{READ_COLUMNS, Statements};
use super::{Bound, SqlBuilder};
use crate::record::Status;
use crate::store::{Backend, Careful, PartitionFence, PartitionRead, TableName};

/// What one database's partition statements differ in, beside [`super::SqlDialect`]. The
/// defaults are SQLite's (one partition, the host's clock); `postgres/partitions.rs` and
/// `mysql/partitions.rs` implement the rest.
pub(crate) trait PartitionSql {
    /// The database's clock in UTC milliseconds, one BIGINT ([`super::SqlDialect::clock_ms`]),
    /// so that leases count on it. `None`: the host's clock, bound (SQLite).
    fn now_ms_expression(&self) -> Option<&'static str> {
        None
    }

    /// The partition of a row of the outbox table, as its index has it when the table has
    /// `partitions` per tenant (migration 0004 / 0007 and `outboxd migrate --partitions` define
    /// it); `None`: one partition (SQLite).
    fn partition_of_row(&self, _partitions: u32) -> Option<Cow<'static, str>> {
        None
    }

    /// The catalog query returning the partition expression of `table` as the database prints
    /// it (one text, NULL or no row where it has none yet), whose mask gives the partition count;
    /// `None`: one partition, always (SQLite).
    fn partition_count_query(&self, _table: &TableName) -> Option<Bound> {
        None
    }

    /// The DDL statements, each run on its own in autocommit, that make `table`'s partition
    /// expression (and its index) mask to `partitions` per tenant, online, producers writing;
    /// a run cut short is run again from the first. Empty: one partition, always (SQLite).
    fn repartition_statements(&self, _table: &TableName, _partitions: u32) -> Vec<String> {
        Vec::new()
    }

    /// Written after the subquery of a partition mark that reads its fence: a shared lock on the
    /// partition's row, so a host taking the partition over waits for the mark to commit (and
    /// the mark, for the takeover; see [`PartitionSql::takeover_lock`]). Nothing where the
    /// database writes one transaction at a time (SQLite).
    fn fence_lock(&self) -> &'static str {
        ""
    }

    /// Appended to the conditions of a takeover ([`take_partition`], whose UPDATE has no alias:
    /// `partitions_table` names its row): a lock on the partition's row that waits for every mark
    /// holding [`PartitionSql::fence_lock`] on it, where the UPDATE's own lock does not
    /// (PostgreSQL: an UPDATE of no key column does not wait for `FOR KEY SHARE`). `None`: the
    /// UPDATE's lock does (MySQL's exclusive lock against a shared one; SQLite).
    fn takeover_lock(&self, _partitions_table: &str) -> Option<String> {
        None
    }

    /// Writes the query listing the partitions of tenant `app_code` that hold live rows
    /// (`pending`, `retryable`, `delivering`), one BIGINT per row, reading a few index entries
    /// per partition (a skip scan), never the backlog; nothing where the tenant has one partition
    /// (SQLite). The worker asks it when reads of its partitions in turn come back empty.
    fn write_live_partitions(
        &self,
        _b: &mut SqlBuilder,
        _table: &TableName,
        _app_code: &str,
        _partitions: u32,
    ) -> bool {
        false
    }

    /// Appended to the conditions of a partition statement: what the partition index's
    /// predicate names beyond the statuses (PostgreSQL: ` AND updated_at_ms IS NOT NULL`, always
    /// true, so that only partition statements can be planned on that index); nothing.
    fn partition_index_predicate(&self) -> &'static str {
        ""
    }

    /// Written after the alias of the outbox table in a partition read: nothing (the planner
    /// picks the partition index); MariaDB/MySQL name it.
    fn partition_index_hint(&self, _table: &TableName) -> String {
        String::new()
    }

    /// Whether a partition read joins its branches as `(SELECT … ORDER BY … LIMIT ?) UNION ALL
    /// (…)`, the caller ordering the rows; else each is a derived table (`SELECT * FROM (…) b0`).
    /// MariaDB writes such a table to disk first (the envelope is a BLOB); these it streams.
    /// A read of several partitions then sorts only the rows' keys, unordered branches in a
    /// temporary table (no BLOB: in memory), and joins the first rows by primary key: an
    /// `ORDER BY … LIMIT` in a branch over several ranges of the index on MariaDB 10.11's
    /// virtual partition column now and then ended the scan early while a row of one range
    /// changed, and the later partitions' rows were missing.
    fn parenthesized_read_branches(&self) -> bool {
        false
    }

    /// Appended to the INSERT creating a tenant's partition rows: keep the ones that exist.
    fn ignore_duplicate_partition(&self) -> &'static str {
        " ON CONFLICT (app_code, partition_id) DO NOTHING"
    }

    /// The type a `CAST` to a BIGINT names (MySQL's is `SIGNED`).
    fn bigint_type(&self) -> &'static str {
        "BIGINT"
    }
}

/// The read's branches: pending rows.
const FROM_PENDING: u8 = 0;
/// `retryable` rows whose retry is due.
const FROM_RETRY: u8 = 1;
/// `delivering` rows of the leased design whose lease expired (a crashed host's).
const FROM_EXPIRED_LEASE: u8 = 2;

/// `now + lease_ms`: the end of a lease taken or renewed now, on the database's clock.
fn lease_end(b: &mut SqlBuilder, lease_ms: i64, now_ms: i64) {
    now(b, now_ms);
    b.push(" + ").bind(lease_ms);
}

/// `now`: the database's clock where it has one, else the host's `now_ms`, bound.
pub(super) fn now(b: &mut SqlBuilder, now_ms: i64) {
    match b.dialect().now_ms_expression() {
        Some(expression) => b.push(expression),
        None => b.bind(now_ms),
    };
}

/// A host's lease, as the statements announcing and renewing a host and taking and renewing its
/// partitions write it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostLease<'a> {
    /// Tenant.
    pub(crate) app_code: &'a str,
    /// The host.
    pub(crate) host_id: &'a str,
    /// Lease length, counted from the database's `now`.
    pub(crate) lease_ms: i64,
    /// The host's clock (SQLite's `now`).
    pub(crate) now_ms: i64,
}

/// Extends this host's life: `alive_until_ms = now + lease_ms` (0 rows: not there yet).
pub(crate) fn renew_host(statements: &Statements, host: &HostLease<'_>) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("UPDATE ")
        .push(&statements.table().hosts_table())
        .push(" SET alive_until_ms = ");
    lease_end(&mut b, host.lease_ms, host.now_ms);
    b.push(" WHERE app_code = ")
        .bind(host.app_code)
        .push(" AND host_id = ")
        .bind(host.host_id);
    b.finish()
}

/// Announces this host: its row, alive until `now + lease_ms`.
pub(crate) fn insert_host(statements: &Statements, host: &HostLease<'_>) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("INSERT INTO ")
        .push(&statements.table().hosts_table())
        .push(" (app_code, host_id, alive_until_ms) VALUES (")
        .bind(host.app_code)
        .push(", ")
        .bind(host.host_id)
        .push(", ");
    lease_end(&mut b, host.lease_ms, host.now_ms);
    b.push(")");
    b.finish()
}

/// Forgets hosts gone for `forget_after_ms`, and this one when it leaves (`host_id`).
pub(crate) fn delete_hosts(
    statements: &Statements,
    app_code: &str,
    leaving: Option<&str>,
    forget_after_ms: i64,
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("DELETE FROM ")
        .push(&statements.table().hosts_table())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND (alive_until_ms < ");
    now(&mut b, now_ms);
    b.push(" - ").bind(forget_after_ms);
    if let Some(host_id) = leaving {
        b.push(" OR host_id = ").bind(host_id);
    }
    b.push(")");
    b.finish()
}

/// The live hosts of a tenant, by id.
pub(crate) fn live_hosts(statements: &Statements, app_code: &str, now_ms: i64) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT host_id FROM ")
        .push(&statements.table().hosts_table())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND alive_until_ms > ");
    now(&mut b, now_ms);
    b.push(" ORDER BY host_id");
    b.finish()
}

/// Creates a tenant's partition rows `0..count`, free, keeping those that exist.
pub(crate) fn seed_partitions(statements: &Statements, app_code: &str, count: u32) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("INSERT INTO ")
        .push(&statements.table().partitions_table())
        .push(" (app_code, partition_id, owner, epoch, lease_until_ms) VALUES ");
    for partition in 0..count {
        if partition > 0 {
            b.push(", ");
        }
        b.push("(")
            .bind(app_code)
            .push(", ")
            .bind(i64::from(partition))
            .push(", NULL, 0, 0)");
    }
    b.push(b.dialect().ignore_duplicate_partition());
    b.finish()
}

/// Renews every partition the host owns: `lease_until_ms = now + lease_ms`.
pub(crate) fn renew_partitions(statements: &Statements, host: &HostLease<'_>) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("UPDATE ")
        .push(&statements.table().partitions_table())
        .push(" SET lease_until_ms = ");
    lease_end(&mut b, host.lease_ms, host.now_ms);
    b.push(" WHERE app_code = ")
        .bind(host.app_code)
        .push(" AND owner = ")
        .bind(host.host_id);
    b.finish()
}

/// Gives up `partitions` of `host_id` (all of them when `None`): no owner, lease over. The epoch
/// stays; the next owner bumps it.
pub(crate) fn release_partitions(
    statements: &Statements,
    app_code: &str,
    host_id: &str,
    partitions: Option<&[u32]>,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("UPDATE ")
        .push(&statements.table().partitions_table())
        .push(" SET owner = NULL, lease_until_ms = 0 WHERE app_code = ")
        .bind(app_code)
        .push(" AND owner = ")
        .bind(host_id);
    if let Some(partitions) = partitions {
        b.push(" AND partition_id IN ")
            .bind_list(partitions.iter().map(|p| i64::from(*p)));
    }
    b.finish()
}

/// Every partition of a tenant: `partition_id, owner, epoch, lease_until_ms, now` (the clock the
/// leases count on, in the same row), then its crash guard: `careful_size, careful_left,
/// suspect_event_id`.
pub(crate) fn partition_leases(statements: &Statements, app_code: &str, now_ms: i64) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT partition_id, owner, epoch, lease_until_ms, ");
    now(&mut b, now_ms);
    b.push(", careful_size, careful_left, suspect_event_id FROM ")
        .push(&statements.table().partitions_table())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" ORDER BY partition_id");
    b.finish()
}

/// Takes partition `partition` for `host_id` if it is still at `epoch` and free or its lease
/// ran out: a new epoch, leased until `now + lease_ms`, and the crash guard's state `careful`
/// (computed from the row read at `epoch`: only its owner changes it, and a new owner bumps the
/// epoch). One row changed: taken. It waits for the marks in flight that hold the partition's
/// fence lock ([`PartitionSql::takeover_lock`]), and they, once it has committed, find the new
/// epoch and change nothing.
pub(crate) fn take_partition(
    statements: &Statements,
    host: &HostLease<'_>,
    (partition, epoch): (u32, i64),
    careful: &Careful,
) -> Bound {
    let HostLease {
        app_code,
        host_id,
        lease_ms,
        now_ms,
    } = *host;
    let mut b = SqlBuilder::new(statements.backend());
    b.push("UPDATE ")
        .push(&statements.table().partitions_table())
        .push(" SET ");
    careful_columns(&mut b, careful);
    b.push(", owner = ")
        .bind(host_id)
        .push(", epoch = epoch + 1, lease_until_ms = ");
    lease_end(&mut b, lease_ms, now_ms);
    b.push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND partition_id = ")
        .bind(i64::from(partition))
        .push(" AND epoch = ")
        .bind(epoch)
        .push(" AND (owner IS NULL OR lease_until_ms < ");
    now(&mut b, now_ms);
    b.push(")");
    if let Some(lock) = b
        .dialect()
        .takeover_lock(&statements.table().partitions_table())
    {
        b.push(&lock);
    }
    b.finish()
}

/// Writes the crash guard's state of partition `fence.partition` owned by `host_id`, fenced: only
/// while it still owns it at `fence.epoch` (one row changed).
pub(crate) fn set_careful(
    statements: &Statements,
    (app_code, host_id): (&str, &str),
    fence: &PartitionFence,
    careful: &Careful,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("UPDATE ")
        .push(&statements.table().partitions_table())
        .push(" SET ");
    careful_columns(&mut b, careful);
    b.push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND partition_id = ")
        .bind(i64::from(fence.partition))
        .push(" AND owner = ")
        .bind(host_id)
        .push(" AND epoch = ")
        .bind(fence.epoch);
    b.finish()
}

/// `careful_size = ?, careful_left = ?, suspect_event_id = ?`.
fn careful_columns(b: &mut SqlBuilder, careful: &Careful) {
    b.push("careful_size = ")
        .bind(i64::from(careful.size))
        .push(", careful_left = ")
        .bind(i64::from(careful.left))
        .push(", suspect_event_id = ");
    match careful.suspect.as_deref() {
        Some(event_id) => b.bind(event_id),
        None => b.push("NULL"),
    };
}

/// Whether rows of the tenant are `delivering` under a live lease (a host of the leased design
/// claiming): one such row's `event_id`, from an index range of the status (`partitions`: the
/// table's count).
pub(crate) fn live_leases(
    statements: &Statements,
    app_code: &str,
    partitions: u32,
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    let chunks = b
        .dialect()
        .status_partition_chunks(Status::Delivering, partitions);
    b.union_of_chunks(
        chunks,
        |b, chunk| {
            b.push("SELECT event_id FROM ")
                .push(statements.table().as_str())
                .push(" WHERE app_code = ")
                .bind(app_code)
                .status_condition(Status::Delivering, chunk)
                .push(" AND lock_until_ms > ")
                .bind(now_ms)
                .push(" LIMIT 1");
        },
        |b| {
            b.push(" LIMIT 1");
        },
    );
    b.finish()
}

/// `app_code = ? AND <partition> = ?` of the rows of the read's partition, or `<partition>
/// BETWEEN <lowest> AND <highest> AND <partition> IN (…)` of its partitions (the worker reads runs
/// of numbers together: the range is exact); on SQLite, one partition: the tenant.
fn in_partitions(b: &mut SqlBuilder, from: &ReadSource<'_>, read: &PartitionRead, alias: &str) {
    b.push(" WHERE ")
        .push(alias)
        .push("app_code = ")
        .bind(read.app_code.as_str());
    if let Some(expression) = from.partition.as_deref() {
        b.push(" AND ").push(expression);
        match read.fences.as_slice() {
            [one] => {
                b.push(" = ").bind(i64::from(one.partition));
            }
            several => {
                // The range first: PostgreSQL seeks it in the partition index (an `IN` list alone
                // it applied as a filter over the tenant's live rows); MariaDB intersects the two
                // into one seek per partition (its index also holds delivered rows).
                let numbers = || several.iter().map(|f| i64::from(f.partition));
                b.push(" >= ")
                    .bind(numbers().min().unwrap_or(0))
                    .push(" AND ")
                    .push(expression)
                    .push(" <= ")
                    .bind(numbers().max().unwrap_or(0))
                    .push(" AND ")
                    .push(expression)
                    .push(" IN ")
                    .bind_list(numbers());
            }
        }
    }
    b.push(from.backend.dialect().partition_index_predicate());
}

/// What a partition read reads from: the table, its backend and the partition expression of
/// its partition count.
struct ReadSource<'a> {
    backend: Backend,
    table: &'a TableName,
    partition: Option<Cow<'static, str>>,
}

/// `FROM <table> c` and the index hint of a partition read.
fn from_table(b: &mut SqlBuilder, from: &ReadSource<'_>, alias: &str) {
    b.push(" FROM ")
        .push(from.table.as_str())
        .push(" ")
        .push(alias)
        .push(&from.backend.dialect().partition_index_hint(from.table));
}

/// ` AND c.room_id NOT IN (…)`: the rooms of the read's partitions with a row in `status` (and,
/// with `not_due_at`, whose retry is later than it). One equality per status, so the index seeks
/// to it; the database hashes the list once per read.
fn rooms_with(
    b: &mut SqlBuilder,
    from: &ReadSource<'_>,
    read: &PartitionRead,
    status: Status,
    not_due_at: Option<i64>,
) {
    b.push(" AND c.room_id NOT IN (SELECT r.room_id");
    from_table(b, from, "r");
    in_partitions(b, from, read, "r.");
    b.push(" AND r.status = ").status(status);
    if let Some(now_ms) = not_due_at {
        b.push(" AND r.next_retry_at_ms > ").bind(now_ms);
    }
    b.push(")");
}

/// The most rows a branch returns: the read's limit, and as many more as the read leaves out
/// (`in_flight`, dropped by the caller: an exclusion in the statement can change its plan).
fn limit_of(read: &PartitionRead) -> i64 {
    i64::from(read.limit) + read.in_flight.len() as i64
}

/// One branch of the read: up to `limit` rows of the read's partition by write order (several
/// partitions: all their rows of the branch, in `parenthesized` form their keys only), with
/// their status and partition.
fn write_branch(
    b: &mut SqlBuilder,
    from: &ReadSource<'_>,
    read: &PartitionRead,
    branch: u8,
    parenthesized: bool,
) {
    // Several partitions in parenthesized form: the rows' keys only (the read joins the rest).
    let keys_only = parenthesized && read.fences.len() > 1;
    b.push(if parenthesized {
        "(SELECT "
    } else {
        "SELECT * FROM (SELECT "
    })
    .push(if keys_only {
        "c.event_id, c.created_at_ms"
    } else {
        READ_COLUMNS
    })
    .push(", c.status, CAST(")
    .push(from.partition.as_deref().unwrap_or("0"))
    .push(" AS ")
    .push(from.backend.dialect().bigint_type())
    .push(") AS row_partition");
    from_table(b, from, "c");
    in_partitions(b, from, read, "c.");
    match branch {
        FROM_PENDING => {
            b.push(" AND c.status = ").status(Status::Pending);
            if read.per_room {
                // A room with an event still retryable or delivering hands out none of its
                // pending ones: its order is kept, and only it waits.
                // One subquery per status: each an equality the index seeks to (an IN list
                // there would filter the partition's whole backlog instead).
                for status in [Status::Retryable, Status::Delivering] {
                    rooms_with(b, from, read, status, None);
                }
            }
        }
        FROM_RETRY => {
            b.push(" AND c.status = ")
                .status(Status::Retryable)
                .push(" AND c.next_retry_at_ms <= ")
                .bind(read.now_ms);
            if read.per_room {
                // A due retry waits while its room has a retry not due yet (an event put back
                // behind an earlier one may be due first) or one delivering.
                rooms_with(b, from, read, Status::Retryable, Some(read.now_ms));
                rooms_with(b, from, read, Status::Delivering, None);
            }
        }
        _ => {
            b.push(" AND c.status = ")
                .status(Status::Delivering)
                .push(" AND c.lock_until_ms <= ")
                .bind(read.now_ms);
        }
    }
    if read.fences.len() == 1 {
        b.push(" ORDER BY c.created_at_ms, c.event_id LIMIT ")
            .bind(limit_of(read));
    }
    // Several partitions: every live row of theirs, ordered and cut by the statement around the
    // branches. An order here would let PostgreSQL walk the tenant's status index in write order
    // instead, filtering out the other partitions' backlogs (and see
    // `PartitionSql::parenthesized_read_branches` for MariaDB).
    if parenthesized {
        b.push(")");
    } else {
        b.push(") b").push(&branch.to_string());
    }
}

/// The due rows of the partitions of `read.fences`, without writing them
/// (the three branches of the module docs of [`crate::store`], "Partitions"), with
/// `READ_COLUMNS`, the status and the partition. One partition: each branch up to `limit` rows by
/// write order, a seek in its part of the partition index. Several (partitions that kept up, so
/// reading all their live rows costs little): through an `IN` list, the first `limit + 1` of them
/// all by write order (one row past the limit tells the caller the read was cut; with
/// [`PartitionSql::parenthesized_read_branches`], their keys, the rows joined). Three branches
/// whatever the partitions, so planning costs what a single partition's does (a branch per
/// partition cost PostgreSQL ~10 ms to plan for 16). The caller merges the branches by write
/// order.
pub(crate) fn read_partitions(statements: &Statements, read: &PartitionRead) -> Bound {
    let (backend, table) = (statements.backend(), statements.table());
    let from = ReadSource {
        backend,
        table,
        partition: backend.dialect().partition_of_row(statements.partitions()),
    };
    let mut b = SqlBuilder::new(backend);
    let parenthesized = backend.dialect().parenthesized_read_branches();
    let several = read.fences.len() > 1;
    if several && parenthesized {
        b.push("SELECT ")
            .push(READ_COLUMNS)
            .push(", k.status, k.row_partition FROM (");
    }
    if several {
        b.push("SELECT * FROM (");
    }
    for (i, branch) in [FROM_PENDING, FROM_RETRY, FROM_EXPIRED_LEASE]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            b.push(" UNION ALL ");
        }
        write_branch(&mut b, &from, read, branch, parenthesized);
    }
    if several {
        b.push(") u ORDER BY u.created_at_ms, u.event_id LIMIT ")
            .bind(limit_of(read) + 1);
    }
    if several && parenthesized {
        // The first rows' keys, sorted in a temporary table without their envelopes; then
        // each row by primary key.
        b.push(") k JOIN ")
            .push(table.as_str())
            .push(" c ON c.app_code = ")
            .bind(read.app_code.as_str())
            .push(" AND c.event_id = k.event_id");
    }
    b.finish()
}
