//! The last hour of this host's work in memory, for the console: [`Recent`] keeps one slot per
//! [`SLOT_MS`] (360 slots) with the rows delivered and failed, the commit → delivered latencies,
//! and per sink the publish durations and what the sink answered. Prometheus keeps totals since
//! start; these are windows ("per second over the last hour", "p99 over the last 5 minutes").
//!
//! Durations go into [`LogHistogram`]s: buckets a quarter of a doubling wide (a quantile is
//! right within ±10 %), from 0.1 ms to days, 512 bytes each. Every method takes the time, so the
//! ring is tested without waiting.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use serde::Serialize;

/// Width of one slot, ms.
pub const SLOT_MS: i64 = 10_000;
/// Slots kept: one hour.
pub const SLOTS: usize = 360;

/// Buckets of a [`LogHistogram`].
const BUCKETS: usize = 128;
/// Buckets per doubling.
const PER_DOUBLING: f64 = 4.0;
/// Lower edge of bucket 0, ms.
const FLOOR_MS: f64 = 0.1;

/// A histogram of durations on a log scale.
#[derive(Debug, Clone)]
pub struct LogHistogram {
    counts: [u32; BUCKETS],
    total: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: [0; BUCKETS],
            total: 0,
        }
    }
}

impl LogHistogram {
    /// Counts one duration of `ms` milliseconds.
    pub fn observe(&mut self, ms: f64) {
        let index = if ms <= FLOOR_MS {
            0
        } else {
            ((ms / FLOOR_MS).log2() * PER_DOUBLING) as usize
        };
        let index = index.min(BUCKETS - 1);
        self.counts[index] = self.counts[index].saturating_add(1);
        self.total += 1;
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &LogHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
        self.total += other.total;
    }

    /// Durations counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (0 < q ≤ 1) in ms: the geometric middle of its bucket; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (index, count) in self.counts.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= rank {
                let middle = (index as f64 + 0.5) / PER_DOUBLING;
                return Some(FLOOR_MS * middle.exp2());
            }
        }
        None
    }
}

/// What one sink answered, per event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SinkAnswers {
    /// Accepted.
    pub delivered: u64,
    /// Failed, to be retried.
    pub retryable: u64,
    /// Refused for good.
    pub permanent: u64,
    /// Not tried (breaker open, sink paused).
    pub deferred: u64,
}

impl SinkAnswers {
    fn add(&mut self, other: &SinkAnswers) {
        self.delivered += other.delivered;
        self.retryable += other.retryable;
        self.permanent += other.permanent;
        self.deferred += other.deferred;
    }
}

#[derive(Debug, Clone, Default)]
struct SinkSlot {
    publish: LogHistogram,
    answers: SinkAnswers,
}

#[derive(Debug, Clone, Default)]
struct TimeSlot {
    start_ms: i64,
    delivered: u64,
    failed: u64,
    latency: LogHistogram,
    sinks: BTreeMap<String, SinkSlot>,
}

/// Rows per second in one slot of [`Recent::rates`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatePoint {
    /// Start of the slot, UTC ms.
    pub start_ms: i64,
    /// Rows marked `delivered` per second.
    pub delivered_per_second: f64,
    /// Rows marked or rejected `failed` per second.
    pub failed_per_second: f64,
}

/// p50/p99 of a window, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quantiles {
    /// Observations in the window.
    pub count: u64,
    /// Median, ms (`None`: nothing observed).
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
}

impl Quantiles {
    fn of(histogram: &LogHistogram) -> Quantiles {
        Quantiles {
            count: histogram.count(),
            p50_ms: histogram.quantile(0.5),
            p99_ms: histogram.quantile(0.99),
        }
    }
}

/// One sink over a window of [`Recent::sink`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SinkWindow {
    /// Publish calls' durations.
    pub publish: Quantiles,
    /// What it answered.
    pub answers: SinkAnswers,
    /// `(retryable + permanent) / (delivered + retryable + permanent)`; `None` without answers.
    pub error_rate: Option<f64>,
}

/// The last hour of this host's work, one slot per [`SLOT_MS`].
#[derive(Debug, Default)]
pub struct Recent {
    slots: Mutex<VecDeque<TimeSlot>>,
}

impl Recent {
    /// Runs `f` on the slot of `now_ms`, opening it (and dropping slots older than an hour).
    fn with_slot(&self, now_ms: i64, f: impl FnOnce(&mut TimeSlot)) {
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        let start_ms = now_ms - now_ms.rem_euclid(SLOT_MS);
        if slots.back().is_none_or(|last| last.start_ms < start_ms) {
            slots.push_back(TimeSlot {
                start_ms,
                ..TimeSlot::default()
            });
        }
        while slots
            .front()
            .is_some_and(|first| first.start_ms <= start_ms - SLOT_MS * SLOTS as i64)
        {
            slots.pop_front();
        }
        // A clock that stepped back writes into the newest slot.
        if let Some(slot) = slots.back_mut() {
            f(slot);
        }
    }

    /// Counts rows marked delivered and failed at `now_ms`.
    pub fn count_rows(&self, now_ms: i64, delivered: u64, failed: u64) {
        if delivered + failed > 0 {
            self.with_slot(now_ms, |slot| {
                slot.delivered += delivered;
                slot.failed += failed;
            });
        }
    }

    /// Records commit → delivered latencies (ms) of rows marked at `now_ms`.
    pub fn observe_latencies(&self, now_ms: i64, latencies_ms: &[i64]) {
        if !latencies_ms.is_empty() {
            self.with_slot(now_ms, |slot| {
                for latency in latencies_ms {
                    slot.latency.observe((*latency).max(0) as f64);
                }
            });
        }
    }

    /// Records one publish to `sink` that took `elapsed_ms` and what it answered.
    pub fn observe_publish(&self, now_ms: i64, sink: &str, elapsed_ms: f64, answers: SinkAnswers) {
        self.with_slot(now_ms, |slot| {
            let entry = slot.sinks.entry(sink.to_string()).or_default();
            entry.publish.observe(elapsed_ms);
            entry.answers.add(&answers);
        });
    }

    /// Rows per second in each slot of the last hour, oldest first, [`SLOTS`] points (slots with
    /// nothing are zero; the current slot is divided by the part of it that has passed).
    pub fn rates(&self, now_ms: i64) -> Vec<RatePoint> {
        let current = now_ms - now_ms.rem_euclid(SLOT_MS);
        let slots = self.slots.lock().map(|s| s.clone()).unwrap_or_default();
        (0..SLOTS as i64)
            .rev()
            .map(|back| {
                let start_ms = current - back * SLOT_MS;
                let seconds = if back == 0 {
                    ((now_ms - start_ms).max(1000)) as f64 / 1000.0
                } else {
                    SLOT_MS as f64 / 1000.0
                };
                let slot = slots.iter().find(|s| s.start_ms == start_ms);
                RatePoint {
                    start_ms,
                    delivered_per_second: slot.map_or(0.0, |s| s.delivered as f64 / seconds),
                    failed_per_second: slot.map_or(0.0, |s| s.failed as f64 / seconds),
                }
            })
            .collect()
    }

    /// Slots that started within `window_ms` of `now_ms`.
    fn window(&self, now_ms: i64, window_ms: i64) -> Vec<TimeSlot> {
        let slots = self.slots.lock().map(|s| s.clone()).unwrap_or_default();
        slots
            .into_iter()
            .filter(|slot| slot.start_ms > now_ms - window_ms - SLOT_MS)
            .collect()
    }

    /// Commit → delivered latency over the last `window_ms`.
    pub fn latency(&self, now_ms: i64, window_ms: i64) -> Quantiles {
        let mut merged = LogHistogram::default();
        for slot in self.window(now_ms, window_ms) {
            merged.merge(&slot.latency);
        }
        Quantiles::of(&merged)
    }

    /// Rows delivered and failed over the last `window_ms`.
    pub fn totals(&self, now_ms: i64, window_ms: i64) -> (u64, u64) {
        self.window(now_ms, window_ms)
            .iter()
            .fold((0, 0), |(d, f), slot| (d + slot.delivered, f + slot.failed))
    }

    /// `sink` over the last `window_ms`.
    pub fn sink(&self, now_ms: i64, sink: &str, window_ms: i64) -> SinkWindow {
        let mut publish = LogHistogram::default();
        let mut answers = SinkAnswers::default();
        for slot in self.window(now_ms, window_ms) {
            if let Some(entry) = slot.sinks.get(sink) {
                publish.merge(&entry.publish);
                answers.add(&entry.answers);
            }
        }
        let tried = answers.delivered + answers.retryable + answers.permanent;
        SinkWindow {
            publish: Quantiles::of(&publish),
            answers,
            error_rate: (tried > 0)
                .then(|| (answers.retryable + answers.permanent) as f64 / tried as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut h = LogHistogram::default();
        for ms in 1..=1000 {
            h.observe(f64::from(ms));
        }
        let p50 = h.quantile(0.5).unwrap();
        let p99 = h.quantile(0.99).unwrap();
        assert!((450.0..=550.0).contains(&p50), "{p50}");
        assert!((890.0..=1090.0).contains(&p99), "{p99}");
        assert_eq!(LogHistogram::default().quantile(0.5), None);
        let mut tiny = LogHistogram::default();
        tiny.observe(0.0);
        tiny.observe(1e12);
        assert!(tiny.quantile(0.01).unwrap() < 0.2);
        assert!(
            tiny.quantile(1.0).unwrap() > 1e8,
            "the last bucket holds the huge ones"
        );
    }

    #[test]
    fn the_ring_keeps_one_hour_of_slots() {
        let recent = Recent::default();
        let t0 = 1_700_000_000_000 - 1_700_000_000_000 % SLOT_MS;
        recent.count_rows(t0, 100, 10);
        recent.count_rows(t0 + 5_000, 100, 0);
        recent.count_rows(t0 + SLOT_MS, 50, 5);
        let rates = recent.rates(t0 + SLOT_MS + SLOT_MS - 1);
        assert_eq!(rates.len(), SLOTS);
        assert_eq!(rates[SLOTS - 2].start_ms, t0);
        assert_eq!(rates[SLOTS - 2].delivered_per_second, 20.0);
        assert_eq!(rates[SLOTS - 2].failed_per_second, 1.0);
        assert!((rates[SLOTS - 1].delivered_per_second - 5.0).abs() < 0.01);
        assert_eq!(recent.totals(t0 + SLOT_MS, 60_000), (250, 15));
        // An hour later the first slots are gone.
        let later = t0 + SLOT_MS * SLOTS as i64;
        recent.count_rows(later, 1, 0);
        assert_eq!(recent.totals(later, SLOT_MS * SLOTS as i64 * 2), (51, 5));
    }

    #[test]
    fn a_sink_window_has_its_error_rate_and_publish_quantiles() {
        let recent = Recent::default();
        let now = 1_700_000_000_000;
        let answers = SinkAnswers {
            delivered: 3,
            retryable: 1,
            ..SinkAnswers::default()
        };
        recent.observe_publish(now, "hook", 10.0, answers);
        recent.observe_publish(
            now,
            "hook",
            10.0,
            SinkAnswers {
                deferred: 4,
                ..SinkAnswers::default()
            },
        );
        let window = recent.sink(now, "hook", 300_000);
        assert_eq!(window.publish.count, 2);
        assert_eq!(window.answers.deferred, 4);
        assert_eq!(window.error_rate, Some(0.25));
        assert!((9.0..=11.5).contains(&window.publish.p50_ms.unwrap()));
        assert_eq!(recent.sink(now, "other", 300_000).error_rate, None);
        recent.observe_latencies(now, &[5, 7, -3]);
        assert_eq!(recent.latency(now, 300_000).count, 3);
    }
}
