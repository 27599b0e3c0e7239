//! MariaDB's form of "the tenant's rows of one status" (migration 0007): the status index is
//! gone, so that a mark that delivers a row changes one secondary index (the partition index),
//! not two. Failed rows and the rest are apart in `idx_<table>_failed (app_code, outbox_failed,
//! created_at_ms, event_id)`; the live statuses are read from the partition index, one range per
//! partition.

use crate::record::Status;
use crate::store::TableName;
use crate::store::statement::SqlBuilder;

/// Most values in one `IN` list: MariaDB turns a list of `in_predicate_conversion_threshold`
/// (1000) values or more into a join with a derived table, planned as a walk of the tenant's
/// whole primary key.
const IN_LIST_LEN: u32 = 512;

/// ` AND outbox_failed = 1 AND status = 'failed'` (a range of the failed-apart index), ` AND
/// outbox_failed = 0 AND status = 'delivered'` (the same index's other range, the few live rows
/// in it skipped), or for a live status ` AND (outbox_partition IN (0, …, 511) OR … IN (…,
/// partitions - 1)) AND status = …` (one range of the partition index per partition: MariaDB
/// 10.11 has no skip scan).
pub(super) fn write_status_condition(b: &mut SqlBuilder, status: Status, partitions: u32) {
    match status {
        Status::Failed => b.push(" AND outbox_failed = 1"),
        Status::Delivered => b.push(" AND outbox_failed = 0"),
        Status::Pending | Status::Retryable | Status::Delivering => {
            b.push(" AND (");
            for partition in 0..partitions.max(1) {
                match partition {
                    0 => b.push("outbox_partition IN (0"),
                    p if p % IN_LIST_LEN == 0 => {
                        b.push(") OR outbox_partition IN (").push(&p.to_string())
                    }
                    p => b.push(", ").push(&p.to_string()),
                };
            }
            b.push("))")
        }
    };
    b.push(" AND status = ").status(status);
}

/// `FORCE INDEX (idx_<table>_part)` for a live status: with more ranges than
/// `eq_range_index_dive_limit` (200) MariaDB estimates them from the index statistics, which the
/// delivered history inflates, and walks the tenant's primary key instead.
pub(super) fn status_index_hint(table: &TableName, status: Status) -> Option<String> {
    matches!(
        status,
        Status::Pending | Status::Retryable | Status::Delivering
    )
    .then(|| format!(" FORCE INDEX (idx_{}_part)", table.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Backend;

    fn condition(status: Status, partitions: u32) -> String {
        let mut b = SqlBuilder::new(Backend::MySql);
        write_status_condition(&mut b, status, partitions);
        b.finish().sql.to_string()
    }

    #[test]
    fn each_status_is_a_range_of_an_index_a_delivery_leaves_alone() {
        assert_eq!(
            condition(Status::Failed, 64),
            " AND outbox_failed = 1 AND status = 'failed'"
        );
        assert_eq!(
            condition(Status::Delivered, 64),
            " AND outbox_failed = 0 AND status = 'delivered'"
        );
        assert_eq!(
            condition(Status::Retryable, 4),
            " AND (outbox_partition IN (0, 1, 2, 3)) AND status = 'retryable'"
        );
        assert_eq!(
            condition(Status::Pending, 0),
            " AND (outbox_partition IN (0)) AND status = 'pending'"
        );
        let all = condition(Status::Delivering, 1024);
        assert!(
            all.starts_with(" AND (outbox_partition IN (0, 1, ")
                && all.contains(", 511) OR outbox_partition IN (512, 513, ")
                && all.ends_with(", 1023)) AND status = 'delivering'"),
            "{all}"
        );
    }
}
