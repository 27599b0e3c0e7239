//! Deadlines nest, checked once by config loading: a plugin's own `timeout_ms` setting < its
//! sink's `limits.publish_timeout` (× the calls a claimed batch is split into) <
//! `worker.publish_timeout` < `worker.lease`, each at least [`DEADLINE_MARGIN`] shorter than the
//! next, so the innermost deadline always answers first and what it answered is marked.

use std::time::Duration;

use super::{ConfigError, Publishing, WorkerConfig, invalid};

/// The least gap between nested deadlines: a plugin's own `timeout_ms` < its sink's
/// `limits.publish_timeout` < `worker.publish_timeout` < `worker.lease`, each inner one at least
/// this much shorter, so the innermost deadline always answers first and its result is marked
/// before the next one fires.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(1);

/// Checks that deadlines nest with [`DEADLINE_MARGIN`]: `worker.publish_timeout` + margin ≤
/// `worker.lease`; a sink's plugin `timeout_ms` setting (when given) + margin ≤ its
/// `limits.publish_timeout`; the sink's publish calls for one claimed batch (`publish_timeout` ×
/// the chunks `max_batch_size` splits it into) + margin ≤ `worker.publish_timeout`. The only
/// place that checks deadlines against each other.
pub(super) fn check(worker: &WorkerConfig, publishing: &Publishing) -> Result<(), ConfigError> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    // `checked_add`: a publish timeout within a second of `Duration::MAX` leaves no lease.
    let least_lease = worker.publish_timeout.checked_add(DEADLINE_MARGIN);
    if least_lease.is_none_or(|least| worker.lease < least) {
        return Err(invalid(
            "worker.lease",
            format!(
                "must be at least worker.publish_timeout ({}) + {}, got {}",
                show(worker.publish_timeout),
                show(DEADLINE_MARGIN),
                show(worker.lease)
            ),
        ));
    }
    for (index, sink) in publishing.sinks().iter().enumerate() {
        let limits = sink.limits();
        let sink_deadline = limits.publish_timeout;
        if let Some(text) = sink.config().get("timeout_ms")
            && let Ok(ms) = text.trim().parse::<u64>()
        {
            let plugin_timeout = Duration::from_millis(ms);
            if plugin_timeout + DEADLINE_MARGIN > sink_deadline {
                return Err(invalid(
                    &format!("sink[{index}].config.timeout_ms"),
                    format!(
                        "sink `{}`: the plugin's timeout ({}) must be at least {} shorter than \
                         sink[{index}].limits.publish_timeout ({})",
                        sink.name(),
                        show(plugin_timeout),
                        show(DEADLINE_MARGIN),
                        show(sink_deadline)
                    ),
                ));
            }
        }
        let chunks = worker.batch_size.div_ceil(limits.max_batch_size.max(1));
        // Checked: a huge sink deadline (× its calls) fits no publish timeout, and must not panic.
        let sink_total = sink_deadline
            .checked_mul(chunks)
            .and_then(|total| total.checked_add(DEADLINE_MARGIN));
        if sink_total.is_none_or(|total| total > worker.publish_timeout) {
            let per_chunk = if chunks > 1 {
                format!(
                    " × {chunks} calls (worker.batch_size {} / limits.max_batch_size {})",
                    worker.batch_size, limits.max_batch_size
                )
            } else {
                String::new()
            };
            return Err(invalid(
                &format!("sink[{index}].limits.publish_timeout"),
                format!(
                    "sink `{}`: {}{per_chunk} must be at least {} shorter than \
                     worker.publish_timeout ({})",
                    sink.name(),
                    show(sink_deadline),
                    show(DEADLINE_MARGIN),
                    show(worker.publish_timeout)
                ),
            ));
        }
    }
    Ok(())
}
