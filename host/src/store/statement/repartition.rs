//! The statements of a change of partition count (`outboxd migrate --partitions`) beside the
//! dialect's DDL ([`super::PartitionSql::repartition_statements`]): the hosts that may still be
//! running, and the partition rows started over for the new count.

use super::partitions::now;
use super::rows::Statements;
use super::{Bound, SqlBuilder};

/// The hosts of every tenant that are alive or own a partition under a live lease, on the
/// database's clock: `host_id`, one row each.
pub(crate) fn running_hosts(statements: &Statements, now_ms: i64) -> Bound {
    let (mut b, table) = (SqlBuilder::new(statements.backend()), statements.table());
    b.push("SELECT host_id FROM ")
        .push(&table.hosts_table())
        .push(" WHERE alive_until_ms > ");
    now(&mut b, now_ms);
    b.push(" UNION SELECT owner FROM ")
        .push(&table.partitions_table())
        .push(" WHERE owner IS NOT NULL AND lease_until_ms > ");
    now(&mut b, now_ms);
    b.finish()
}

/// The partition rows of every tenant started over for `partitions` per tenant: the numbers at
/// or above it deleted (the hosts create the missing ones), every row free, out of the crash
/// guard's care, at a new epoch (a mark read under the old count is refused).
pub(crate) fn restart_partitions(statements: &Statements, partitions: u32) -> [Bound; 2] {
    let (backend, table) = (statements.backend(), statements.table());
    let mut delete = SqlBuilder::new(backend);
    delete
        .push("DELETE FROM ")
        .push(&table.partitions_table())
        .push(" WHERE partition_id >= ")
        .bind(i64::from(partitions));
    let mut reset = SqlBuilder::new(backend);
    reset.push("UPDATE ").push(&table.partitions_table()).push(
        " SET owner = NULL, lease_until_ms = 0, epoch = epoch + 1, careful_size = 0, \
             careful_left = 0, suspect_event_id = NULL",
    );
    [delete.finish(), reset.finish()]
}
