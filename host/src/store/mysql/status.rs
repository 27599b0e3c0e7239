//! MariaDB's form of "the tenant's rows of one status" (migration 0007): the status index is
//! gone, so that a mark that delivers a row changes one secondary index (the partition index),
//! not two. Failed rows and the rest are apart in `idx_<table>_failed (app_code, outbox_failed,
//! created_at_ms, event_id)`; the live statuses are read from the partition index, one range per
//! partition.

use std::ops::Range;

use crate::record::Status;
use crate::store::statement::SqlBuilder;

/// Most partitions one statement looks up by a live status. Past `eq_range_index_dive_limit`
/// (200) ranges MariaDB estimates them from the index statistics, which the delivered history
/// inflates, and walks the tenant's primary key instead; an index hint would keep the index, but
/// a `FORCE INDEX` read of this shape (a filesort under `ORDER BY … LIMIT`) now and then returned
/// no rows under load. So a larger table is read in chunks joined by `UNION ALL`.
const CHUNK: u32 = 128;

/// ` AND outbox_failed = 1 AND status = 'failed'` (a range of the failed-apart index), ` AND
/// outbox_failed = 0 AND status = 'delivered'` (the same index's other range, the few live rows
/// in it skipped), or for a live status ` AND outbox_partition IN (<partitions>) AND status = …`
/// (one range of the partition index per partition: MariaDB 10.11 has no skip scan).
pub(super) fn write_status_condition(b: &mut SqlBuilder, status: Status, partitions: Range<u32>) {
    match status {
        Status::Failed => b.push(" AND outbox_failed = 1"),
        Status::Delivered => b.push(" AND outbox_failed = 0"),
        Status::Pending | Status::Retryable | Status::Delivering => {
            let end = partitions.end.max(partitions.start + 1);
            let numbers: Vec<String> = (partitions.start..end).map(|p| p.to_string()).collect();
            b.push(" AND outbox_partition IN (")
                .push(&numbers.join(", "))
                .push(")")
        }
    };
    b.push(" AND status = ").status(status);
}

/// A live status: ranges of at most [`CHUNK`] partitions; `failed` and `delivered`: one (their
/// index does not hold the partition).
pub(super) fn status_partition_chunks(status: Status, partitions: u32) -> Vec<Range<u32>> {
    let partitions = partitions.max(1);
    match status {
        Status::Failed | Status::Delivered => std::iter::once(0..partitions).collect(),
        Status::Pending | Status::Retryable | Status::Delivering => (0..partitions)
            .step_by(CHUNK as usize)
            .map(|start| start..(start + CHUNK).min(partitions))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Backend;

    fn condition(status: Status, partitions: Range<u32>) -> String {
        let mut b = SqlBuilder::new(Backend::MySql);
        write_status_condition(&mut b, status, partitions);
        b.finish().sql.to_string()
    }

    #[test]
    fn each_status_is_a_range_of_an_index_a_delivery_leaves_alone() {
        assert_eq!(
            condition(Status::Failed, 0..64),
            " AND outbox_failed = 1 AND status = 'failed'"
        );
        assert_eq!(
            condition(Status::Delivered, 0..64),
            " AND outbox_failed = 0 AND status = 'delivered'"
        );
        assert_eq!(
            condition(Status::Retryable, 0..4),
            " AND outbox_partition IN (0, 1, 2, 3) AND status = 'retryable'"
        );
        assert_eq!(
            condition(Status::Pending, 0..0),
            " AND outbox_partition IN (0) AND status = 'pending'"
        );
        assert_eq!(
            condition(Status::Delivering, 256..259),
            " AND outbox_partition IN (256, 257, 258) AND status = 'delivering'"
        );
    }

    #[test]
    fn live_statuses_are_read_in_chunks_below_the_dive_limit() {
        assert_eq!(status_partition_chunks(Status::Pending, 64), vec![0..64]);
        assert_eq!(status_partition_chunks(Status::Pending, 0), vec![0..1]);
        assert_eq!(
            status_partition_chunks(Status::Retryable, 300),
            vec![0..128, 128..256, 256..300]
        );
        let all = status_partition_chunks(Status::Delivering, 1024);
        assert_eq!(all.len(), 8);
        assert!(all.iter().all(|c| c.len() as u32 <= CHUNK && c.len() < 200));
        assert_eq!(status_partition_chunks(Status::Failed, 1024), vec![0..1024]);
        assert_eq!(
            status_partition_chunks(Status::Delivered, 1024),
            vec![0..1024]
        );
    }
}
