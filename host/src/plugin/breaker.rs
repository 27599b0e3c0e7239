//! Per-sink circuit breaker: a sink whose batches fail as retryable `failures` times in a row
//! opens for `cool_down`; while open its events are answered [`Outcome::Deferred`] (back to
//! `retryable` without spending an attempt) and other sinks keep flowing; then one probe batch
//! is let through (half-open): any answer other than "all retryable" closes the breaker, a
//! failing probe opens it again (its events deferred too, so a long outage costs no attempts).
//!
//! [`Breaker`] is the state machine (time passed in, no I/O); [`BreakerSink`] wraps a sink's
//! [`Publisher`] with it, reporting state changes to the log and `outboxd_breaker_state`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::{info, warn};

use crate::config::BreakerSettings;
use crate::metrics::{BreakerGauge, Metrics};
use crate::publish::{Event, Outcome, Publisher};

/// Longest wait given to events that arrive while a probe batch is in flight.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Publishing; `failures` failing batches in a row so far.
    Closed {
        /// Consecutive failing batches.
        failures: u32,
    },
    /// Deferring every batch until `until`.
    Open {
        /// End of the cool-down.
        until: Instant,
    },
    /// One probe batch is in flight; other batches are deferred.
    HalfOpen,
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Publish it (breaker closed).
    Publish,
    /// Publish it as the probe (breaker half-open).
    Probe,
    /// Do not publish; put the events back for this long.
    Defer(Duration),
}

/// How a published batch went, as far as the breaker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The sink answered (something delivered or refused for good).
    Answered,
    /// Every event failed as retryable, or the publish was abandoned (timeout).
    Failed,
}

impl Verdict {
    /// `Failed` when every event tried is retryable (a sink that is down or timing out); the
    /// events not tried (deferred: held behind their room's failed event) do not count.
    pub fn of(outcomes: &[Outcome]) -> Verdict {
        let mut tried = outcomes
            .iter()
            .filter(|o| !matches!(o, Outcome::Deferred { .. }))
            .peekable();
        let all_retryable =
            tried.peek().is_some() && tried.all(|o| matches!(o, Outcome::Retryable { .. }));
        if all_retryable {
            Verdict::Failed
        } else {
            Verdict::Answered
        }
    }
}

/// The state machine of one sink's breaker.
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    state: BreakerState,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            state: BreakerState::Closed { failures: 0 },
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Decides about a batch arriving at `now` (an expired cool-down half-opens here).
    pub fn admit(&mut self, now: Instant) -> Admission {
        if self.settings.failures == 0 {
            return Admission::Publish;
        }
        match self.state {
            BreakerState::Closed { .. } => Admission::Publish,
            BreakerState::Open { until } if now < until => Admission::Defer(until - now),
            BreakerState::Open { .. } => {
                self.state = BreakerState::HalfOpen;
                Admission::Probe
            }
            BreakerState::HalfOpen => Admission::Defer(PROBE_WAIT.min(self.settings.cool_down)),
        }
    }

    /// Records how an admitted batch went; returns the new state when it changed.
    pub fn record(
        &mut self,
        admission: Admission,
        verdict: Verdict,
        now: Instant,
    ) -> Option<BreakerState> {
        if self.settings.failures == 0 {
            return None;
        }
        let before = self.state;
        self.state = match (admission, verdict, before) {
            (Admission::Defer(_), _, state) => state,
            (Admission::Probe, Verdict::Answered, _) => BreakerState::Closed { failures: 0 },
            (Admission::Probe, Verdict::Failed, _) => BreakerState::Open {
                until: now + self.settings.cool_down,
            },
            // A batch admitted while closed that answers closes (and resets) whatever the state.
            (Admission::Publish, Verdict::Answered, BreakerState::Closed { .. }) => {
                BreakerState::Closed { failures: 0 }
            }
            (Admission::Publish, Verdict::Failed, BreakerState::Closed { failures }) => {
                if failures + 1 >= self.settings.failures {
                    BreakerState::Open {
                        until: now + self.settings.cool_down,
                    }
                } else {
                    BreakerState::Closed {
                        failures: failures + 1,
                    }
                }
            }
            // Batches admitted before the breaker opened change nothing once it is open.
            (Admission::Publish, _, state) => state,
        };
        (self.state != before).then_some(self.state)
    }
}

/// A sink's publisher behind its breaker.
pub struct BreakerSink {
    name: Arc<str>,
    inner: Arc<dyn Publisher>,
    breaker: Arc<Mutex<Breaker>>,
    metrics: Metrics,
}

impl BreakerSink {
    /// Wraps `inner`, the publisher of sink `name`.
    pub fn new(
        name: &str,
        inner: Arc<dyn Publisher>,
        settings: BreakerSettings,
        metrics: Metrics,
    ) -> BreakerSink {
        metrics.set_breaker_state(name, BreakerGauge::Closed);
        BreakerSink {
            name: Arc::from(name),
            inner,
            breaker: Arc::new(Mutex::new(Breaker::new(settings))),
            metrics,
        }
    }

    /// The breaker's current state.
    pub fn state(&self) -> BreakerState {
        self.breaker
            .lock()
            .map_or(BreakerState::Closed { failures: 0 }, |b| b.state())
    }
}

/// Records the verdict of an admitted batch, `Failed` if the publish is dropped before it ends
/// (the worker's publish timeout), so a probe never stays in flight forever.
struct Pending<'a> {
    sink: &'a BreakerSink,
    admission: Admission,
    done: bool,
}

impl Pending<'_> {
    fn finish(mut self, verdict: Verdict) {
        self.done = true;
        self.sink.record(self.admission, verdict);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.sink.record(self.admission, Verdict::Failed);
        }
    }
}

impl BreakerSink {
    fn record(&self, admission: Admission, verdict: Verdict) {
        let (before, changed) = match self.breaker.lock() {
            Ok(mut breaker) => (
                breaker.state(),
                breaker.record(admission, verdict, Instant::now()),
            ),
            Err(_) => return,
        };
        match changed {
            // A failing batch counted while closed (or the count reset) changes no state worth
            // a line.
            Some(BreakerState::Closed { .. }) if matches!(before, BreakerState::Closed { .. }) => {}
            Some(BreakerState::Open { until }) => {
                let cool_down = until.saturating_duration_since(Instant::now());
                warn!(sink = %self.name, breaker = "open", cool_down = %humantime::format_duration(round_ms(cool_down)),
                    "circuit breaker opened: events are put back without spending an attempt");
                self.metrics
                    .set_breaker_state(&self.name, BreakerGauge::Open);
            }
            Some(BreakerState::Closed { .. }) => {
                info!(sink = %self.name, breaker = "closed", "circuit breaker closed: probe batch answered");
                self.metrics
                    .set_breaker_state(&self.name, BreakerGauge::Closed);
            }
            Some(BreakerState::HalfOpen) | None => {}
        }
    }
}

fn round_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}

#[async_trait]
impl Publisher for BreakerSink {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        self.publish_through(batch, None).await
    }

    /// The batch's waves run below the breaker, admitted as one batch (an outage fails the
    /// first wave, whose rooms then hold back all their later events).
    async fn publish_in_waves(&self, batch: &[Event], timeout: Duration) -> Vec<Outcome> {
        self.publish_through(batch, Some(timeout)).await
    }
}

impl BreakerSink {
    /// Publishes `batch` if the breaker admits it (in per-room waves within `waves`, when
    /// given), else defers every event.
    async fn publish_through(&self, batch: &[Event], waves: Option<Duration>) -> Vec<Outcome> {
        let admission = match self.breaker.lock() {
            Ok(mut breaker) => breaker.admit(Instant::now()),
            Err(_) => Admission::Publish,
        };
        let wait = match admission {
            Admission::Defer(wait) => wait,
            Admission::Probe => {
                info!(sink = %self.name, breaker = "half-open", events = batch.len(), "circuit breaker half-open: publishing a probe batch");
                self.metrics
                    .set_breaker_state(&self.name, BreakerGauge::HalfOpen);
                return self.publish_admitted(batch, admission, waves).await;
            }
            Admission::Publish => return self.publish_admitted(batch, admission, waves).await,
        };
        let message = format!(
            "circuit breaker of sink `{}` is open; retrying in {}",
            self.name,
            humantime::format_duration(round_ms(wait))
        );
        vec![Outcome::deferred(message, wait); batch.len()]
    }
}

impl BreakerSink {
    async fn publish_admitted(
        &self,
        batch: &[Event],
        admission: Admission,
        waves: Option<Duration>,
    ) -> Vec<Outcome> {
        let pending = Pending {
            sink: self,
            admission,
            done: false,
        };
        let outcomes = match waves {
            Some(timeout) => self.inner.publish_in_waves(batch, timeout).await,
            None => self.inner.publish(batch).await,
        };
        let verdict = Verdict::of(&outcomes);
        pending.finish(verdict);
        if admission == Admission::Probe && verdict == Verdict::Failed {
            // The sink is still down: the probe's events wait for the next probe like the rest.
            let wait = match self.state() {
                BreakerState::Open { until } => until.saturating_duration_since(Instant::now()),
                _ => PROBE_WAIT,
            };
            return outcomes
                .into_iter()
                .map(|outcome| match outcome {
                    Outcome::Retryable { message, .. } => Outcome::deferred(message, wait),
                    other => other,
                })
                .collect();
        }
        outcomes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(failures: u32, cool_down_ms: u64) -> BreakerSettings {
        BreakerSettings {
            failures,
            cool_down: Duration::from_millis(cool_down_ms),
        }
    }

    #[test]
    fn opens_after_failures_in_a_row_then_probes_and_closes() {
        let t0 = Instant::now();
        let mut breaker = Breaker::new(settings(3, 1000));
        for failures in 1..=2 {
            assert_eq!(breaker.admit(t0), Admission::Publish);
            assert_eq!(
                breaker.record(Admission::Publish, Verdict::Failed, t0),
                Some(BreakerState::Closed { failures })
            );
        }
        // An answered batch resets the count.
        breaker.record(Admission::Publish, Verdict::Answered, t0);
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
        for _ in 0..2 {
            breaker.record(Admission::Publish, Verdict::Failed, t0);
        }
        let opened = breaker.record(Admission::Publish, Verdict::Failed, t0);
        assert_eq!(
            opened,
            Some(BreakerState::Open {
                until: t0 + Duration::from_millis(1000)
            })
        );
        let later = t0 + Duration::from_millis(400);
        assert_eq!(
            breaker.admit(later),
            Admission::Defer(Duration::from_millis(600))
        );
        let after = t0 + Duration::from_millis(1000);
        assert_eq!(breaker.admit(after), Admission::Probe);
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        // While the probe is out, everything else waits.
        assert!(matches!(breaker.admit(after), Admission::Defer(_)));
        // A late batch admitted before the opening changes nothing.
        assert_eq!(
            breaker.record(Admission::Publish, Verdict::Answered, after),
            None
        );
        assert_eq!(
            breaker.record(Admission::Probe, Verdict::Failed, after),
            Some(BreakerState::Open {
                until: after + Duration::from_millis(1000)
            })
        );
        let again = after + Duration::from_millis(1000);
        assert_eq!(breaker.admit(again), Admission::Probe);
        assert_eq!(
            breaker.record(Admission::Probe, Verdict::Answered, again),
            Some(BreakerState::Closed { failures: 0 })
        );
        assert_eq!(breaker.admit(again), Admission::Publish);
    }

    #[test]
    fn zero_failures_turns_the_breaker_off() {
        let t0 = Instant::now();
        let mut breaker = Breaker::new(settings(0, 1000));
        for _ in 0..10 {
            assert_eq!(breaker.admit(t0), Admission::Publish);
            assert_eq!(
                breaker.record(Admission::Publish, Verdict::Failed, t0),
                None
            );
        }
    }

    #[test]
    fn only_all_retryable_batches_count_as_failures() {
        assert_eq!(
            Verdict::of(&[Outcome::retryable("a"), Outcome::retryable("b")]),
            Verdict::Failed
        );
        assert_eq!(
            Verdict::of(&[Outcome::retryable("a"), Outcome::Delivered]),
            Verdict::Answered
        );
        assert_eq!(
            Verdict::of(&[Outcome::permanent("gone")]),
            Verdict::Answered
        );
        // Events held behind their room's failed one were not tried: they do not count.
        let held = Outcome::deferred("not tried", Duration::ZERO);
        assert_eq!(
            Verdict::of(&[Outcome::retryable("a"), held.clone()]),
            Verdict::Failed
        );
        assert_eq!(Verdict::of(&[held]), Verdict::Answered);
    }
}
