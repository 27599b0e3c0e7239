//! The metrics of partition ownership: each host's partitions, its fair share, the live hosts,
//! partitions taken, released and lost, and the lag of each owned partition.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::AppLabels;

/// Labels of a change of ownership.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionChangeLabels {
    /// Tenant.
    pub app_code: String,
    /// `taken`, `released` (given up to rebalance or on shutdown), `lost` (taken over by another
    /// host while this one believed it owned it).
    pub change: String,
}

/// Labels of one partition's series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// Tenant.
    pub app_code: String,
    /// The partition number.
    pub partition: String,
}

/// One tenant's partitions as this host holds them, for the console ([`PartitionMetrics::view`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PartitionView {
    /// Tenant.
    pub app_code: String,
    /// Partitions this host owns.
    pub owned: usize,
    /// This host's fair share.
    pub share: u32,
    /// Live hosts sharing the tenant's partitions.
    pub hosts: u32,
    /// Partitions taken, released and lost by this host since it started.
    pub taken: u64,
    /// See `taken`.
    pub released: u64,
    /// See `taken`.
    pub lost: u64,
    /// Partitions taken from a host whose lease ran out, into the crash guard's care.
    pub guarded: u64,
    /// Each owned partition and the age, in ms, of the oldest row of its last read (0: none).
    pub lag_ms: BTreeMap<u32, i64>,
}

/// The partition families of one registry.
#[derive(Clone)]
pub struct PartitionMetrics {
    /// What the console shows, per tenant (the families cannot be read back by label).
    views: Arc<Mutex<BTreeMap<String, PartitionView>>>,
    owned: Family<AppLabels, Gauge>,
    share: Family<AppLabels, Gauge>,
    hosts: Family<AppLabels, Gauge>,
    changes: Family<PartitionChangeLabels, Counter>,
    lag: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
}

impl PartitionMetrics {
    /// Registers the families in `registry` (prefix `outboxd_partition`).
    pub(super) fn register(registry: &mut Registry) -> PartitionMetrics {
        let owned = Family::<AppLabels, Gauge>::default();
        registry.register(
            "partitions_owned",
            "Partitions of the app code this host owns",
            owned.clone(),
        );
        let share = Family::<AppLabels, Gauge>::default();
        registry.register(
            "partition_share",
            "Partitions of the app code this host should own: its fair share among the live hosts",
            share.clone(),
        );
        let hosts = Family::<AppLabels, Gauge>::default();
        registry.register(
            "partition_hosts",
            "Live hosts sharing the app code's partitions, as this host last saw them",
            hosts.clone(),
        );
        let changes = Family::<PartitionChangeLabels, Counter>::default();
        registry.register(
            "partition_changes",
            "Partitions taken, released (rebalance, shutdown) and lost (taken over while this host believed it owned them)",
            changes.clone(),
        );
        let lag = Family::<PartitionLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "partition_lag_seconds",
            "Age of the oldest row in the last read of an owned partition, 0 when the read found none",
            lag.clone(),
        );
        PartitionMetrics {
            views: Arc::default(),
            owned,
            share,
            hosts,
            changes,
            lag,
        }
    }

    /// This host's partitions per tenant, as the last heartbeats and reads left them.
    pub fn view(&self) -> Vec<PartitionView> {
        self.views
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Changes the console's view of `app_code`.
    fn update_view(&self, app_code: &str, change: impl FnOnce(&mut PartitionView)) {
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        let view = views
            .entry(app_code.to_string())
            .or_insert_with(|| PartitionView {
                app_code: app_code.to_string(),
                ..PartitionView::default()
            });
        change(view);
    }

    /// Records a heartbeat's view: partitions owned, the fair share, live hosts.
    pub fn set_ownership(&self, app_code: &str, owned: usize, share: u32, hosts: u32) {
        self.update_view(app_code, |view| {
            view.owned = owned;
            view.share = share;
            view.hosts = hosts;
        });
        let labels = AppLabels {
            app_code: app_code.to_string(),
        };
        self.owned.get_or_create(&labels).set(owned as i64);
        self.share.get_or_create(&labels).set(i64::from(share));
        self.hosts.get_or_create(&labels).set(i64::from(hosts));
    }

    /// Counts `count` partitions of `app_code` `taken`, `released`, `lost` or `guarded` (taken
    /// into the crash guard's care).
    pub fn count_change(&self, app_code: &str, change: &'static str, count: usize) {
        self.update_view(app_code, |view| match change {
            "taken" => view.taken += count as u64,
            "released" => view.released += count as u64,
            "guarded" => view.guarded += count as u64,
            _ => view.lost += count as u64,
        });
        if count > 0 {
            self.changes
                .get_or_create(&PartitionChangeLabels {
                    app_code: app_code.to_string(),
                    change: change.to_string(),
                })
                .inc_by(count as u64);
        }
    }

    /// The partitions of `app_code` counted as `change` so far.
    pub fn changes(&self, app_code: &str, change: &'static str) -> u64 {
        self.changes
            .get(&PartitionChangeLabels {
                app_code: app_code.to_string(),
                change: change.to_string(),
            })
            .map_or(0, |counter| counter.get())
    }

    /// Records the lag of one partition: the age of the oldest row its last read returned.
    pub fn set_lag(&self, app_code: &str, partition: u32, lag_ms: i64) {
        self.update_view(app_code, |view| {
            view.lag_ms.insert(partition, lag_ms.max(0));
        });
        self.lag
            .get_or_create(&PartitionLabels {
                app_code: app_code.to_string(),
                partition: partition.to_string(),
            })
            .set(lag_ms.max(0) as f64 / 1000.0);
    }

    /// Drops the lag series of a partition this host no longer owns.
    pub fn forget_lag(&self, app_code: &str, partition: u32) {
        self.update_view(app_code, |view| {
            view.lag_ms.remove(&partition);
        });
        self.lag.remove(&PartitionLabels {
            app_code: app_code.to_string(),
            partition: partition.to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::PartitionMetrics;
    use prometheus_client::registry::Registry;

    #[test]
    fn the_view_follows_heartbeats_and_reads() {
        let metrics = PartitionMetrics::register(&mut Registry::default());
        metrics.set_ownership("app", 3, 32, 2);
        metrics.count_change("app", "taken", 3);
        metrics.set_lag("app", 7, 1_500);
        metrics.set_lag("app", 9, 0);
        metrics.forget_lag("app", 9);
        metrics.count_change("app", "lost", 1);
        metrics.count_change("app", "guarded", 2);
        let [view] = metrics.view().try_into().unwrap();
        assert_eq!((view.owned, view.share, view.hosts), (3, 32, 2));
        assert_eq!((view.taken, view.lost, view.guarded), (3, 1, 2));
        assert_eq!(metrics.changes("app", "guarded"), 2);
        assert_eq!(
            view.lag_ms.into_iter().collect::<Vec<_>>(),
            vec![(7, 1_500)]
        );
    }
}
