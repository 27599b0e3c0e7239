//! The pieces of a fenced write (a mark, a read's rejection): rows still live, and the partition
//! row still owned by the writer at the epoch it read at.

use super::SqlBuilder;
use crate::record::Status;
use crate::store::{PartitionFence, TableName};

/// ` AND status IN ('pending', 'retryable', 'delivering')`: rows not finished yet, the only ones
/// a fenced write changes.
pub(crate) fn live_rows(b: &mut SqlBuilder) {
    b.push(" AND status IN (")
        .status(Status::Pending)
        .push(", ")
        .status(Status::Retryable)
        .push(", ")
        .status(Status::Delivering)
        .push(")");
}

/// ` AND EXISTS (SELECT 1 FROM <partitions> p WHERE p.app_code = ? AND p.owner = ?`: the start of
/// a partition fence, whose partition and epoch conditions and lock follow.
pub(super) fn owned_partition_open(
    b: &mut SqlBuilder,
    table: &TableName,
    app_code: &str,
    owner: &str,
) {
    b.push(" AND EXISTS (SELECT 1 FROM ")
        .push(&table.partitions_table())
        .push(" p WHERE p.app_code = ")
        .bind(app_code)
        .push(" AND p.owner = ")
        .bind(owner);
}

/// ` AND p.partition_id = ? AND p.epoch = ?` of one partition's fence.
pub(super) fn at_epoch(b: &mut SqlBuilder, fence: &PartitionFence) {
    b.push(" AND p.partition_id = ")
        .bind(i64::from(fence.partition))
        .push(" AND p.epoch = ")
        .bind(fence.epoch);
}

/// ` AND EXISTS (…)`: `owner` still owns partition `fence.partition` of `app_code` at
/// `fence.epoch` (read under the dialect's shared lock), as a mark of one partition checks it.
pub(crate) fn owned_partition(
    b: &mut SqlBuilder,
    table: &TableName,
    app_code: &str,
    owner: &str,
    fence: &PartitionFence,
) {
    owned_partition_open(b, table, app_code, owner);
    at_epoch(b, fence);
    b.push(b.dialect().fence_lock()).push(")");
}
