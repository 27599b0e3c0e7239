//! The default `worker.batch_size`: [`DEFAULT_BATCH_SIZE`] rows per claim, lowered (never below
//! [`LEAST_DEFAULT_BATCH_SIZE`]) so that every sink's calls for one claimed batch fit in
//! `worker.publish_timeout` ([`super::deadlines`]). A batch size set in the file or the
//! environment is taken as given and checked as such.

use std::time::Duration;

use super::{DEADLINE_MARGIN, Publishing};

/// Rows per claim when `worker.batch_size` is not set and the sinks' limits allow it: a backlog
/// on PostgreSQL or MariaDB drains at the raw SQL loop's speed or better with it (500 reached
/// ~0.93×; docs/PERFORMANCE.md).
pub const DEFAULT_BATCH_SIZE: u32 = 1000;

/// The least default batch (the default of earlier releases): the default rule never goes
/// below it, so a configuration that loaded with the earlier default still loads.
pub const LEAST_DEFAULT_BATCH_SIZE: u32 = 500;

/// The default batch size for these sinks and this `worker.publish_timeout`: the largest batch up
/// to [`DEFAULT_BATCH_SIZE`] whose publish calls every sink can make in time (`limits.max_batch_size`
/// events per call, one `limits.publish_timeout` each, plus [`DEADLINE_MARGIN`]), and at least
/// [`LEAST_DEFAULT_BATCH_SIZE`] (below that the deadline check reports the sink at fault).
pub(super) fn default_batch_size(publishing: &Publishing, publish_timeout: Duration) -> u32 {
    let budget = publish_timeout.saturating_sub(DEADLINE_MARGIN);
    publishing
        .sinks()
        .iter()
        .map(|sink| {
            let limits = sink.limits();
            let calls = budget.as_nanos() / limits.publish_timeout.as_nanos().max(1);
            let fits = calls.saturating_mul(u128::from(limits.max_batch_size.max(1)));
            u32::try_from(fits).unwrap_or(u32::MAX)
        })
        .fold(DEFAULT_BATCH_SIZE, u32::min)
        .max(LEAST_DEFAULT_BATCH_SIZE)
}

impl super::Config {
    /// For a reload: when this configuration and the `running` one both take the default
    /// `worker.batch_size` and the new sinks' limits moved it, keeps the running batch size as
    /// long as these sinks still fit it, so that a sink change alone needs no restart. (A batch
    /// size that must change is then named by the reload's restart-only check.)
    pub fn keep_running_default_batch(&mut self, running: &super::Config) {
        let now = &running.worker;
        if !(now.batch_size_is_default && self.worker.batch_size_is_default)
            || now.batch_size == self.worker.batch_size
        {
            return;
        }
        let mut kept = self.worker.clone();
        kept.batch_size = now.batch_size;
        if super::deadlines::check(&kept, &self.publishing).is_ok() {
            self.worker = kept;
        }
    }
}
