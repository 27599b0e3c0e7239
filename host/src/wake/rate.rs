//! The host's arrival rate, which decides how an idle loop on a gated commit feed (PostgreSQL,
//! [`super::gate`]) waits: while rows arrive slowly it arms the gate and sleeps until a commit
//! notifies it; while they arrive fast it probes every [`BUSY_PROBE`] instead, and the producers'
//! commits notify no one.
//!
//! Why: PostgreSQL serialises every transaction that sends a `NOTIFY` through one cluster-wide
//! lock held across the commit's WAL flush, so commits that notify cannot share a flush. At a few
//! hundred commits a second that costs the producers nothing measurable; at thousands it caps
//! them at about one commit per WAL flush. At those rates a probe every [`BUSY_PROBE`] finds rows
//! every time, so it costs no wasted claims and delivers as soon as a notification would.

use std::time::{Duration, Instant};

/// Rows per second (an exponentially weighted average over [`TIME_CONSTANT`]) from which the
/// table counts as busy: loops probe, and the gate is disarmed.
pub const BUSY_RATE: f64 = 500.0;

/// Rows per second below which a busy table counts as quiet again (hysteresis: a rate near
/// [`BUSY_RATE`] does not flip the mode at every round).
pub const QUIET_RATE: f64 = 250.0;

/// The wait of a loop on a busy table, counted from the start of its round: at [`BUSY_RATE`]
/// a probe finds a row or more.
pub const BUSY_PROBE: Duration = Duration::from_millis(2);

/// How far back the average looks: rows of the last ~50 ms count most, so a burst turns the
/// table busy within a few rounds and an idle table turns quiet ~0.1 s after its last rows.
pub const TIME_CONSTANT: Duration = Duration::from_millis(50);

/// The rows per second the host's loops find, shared by them (every round records what it
/// claimed), and whether that makes the table busy.
#[derive(Debug, Clone, Default)]
pub struct ArrivalRate {
    per_sec: f64,
    last: Option<Instant>,
    busy: bool,
}

impl ArrivalRate {
    /// Records a round at `now` that took `rows` rows; returns whether the table is busy.
    pub fn record(&mut self, rows: u64, now: Instant) -> bool {
        let Some(last) = self.last.replace(now) else {
            return self.busy;
        };
        // Rounds of two loops may end together: a floor keeps the rate finite.
        let dt = now.saturating_duration_since(last).as_secs_f64().max(1e-6);
        let decay = (-dt / TIME_CONSTANT.as_secs_f64()).exp();
        self.per_sec = self.per_sec * decay + (rows as f64) * (1.0 - decay) / dt;
        self.busy = if self.busy {
            self.per_sec >= QUIET_RATE
        } else {
            self.per_sec >= BUSY_RATE
        };
        self.busy
    }

    /// Whether the table was busy at the last round.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// The current average, rows per second.
    pub fn per_sec(&self) -> f64 {
        self.per_sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `per_sec` rows a second for `span`, one round every `every`.
    fn feed(
        rate: &mut ArrivalRate,
        at: &mut Instant,
        per_sec: f64,
        every: Duration,
        span: Duration,
    ) {
        let rounds = (span.as_secs_f64() / every.as_secs_f64()) as u64;
        let mut owed = 0.0;
        for _ in 0..rounds {
            *at += every;
            owed += per_sec * every.as_secs_f64();
            let rows = owed.floor();
            owed -= rows;
            rate.record(rows as u64, *at);
        }
    }

    #[test]
    fn the_rate_follows_the_rows_and_turns_busy_and_quiet_with_hysteresis() {
        let mut rate = ArrivalRate::default();
        let mut at = Instant::now();
        assert!(!rate.record(0, at));
        // 200 rows/s, one row every 5 ms (a notified loop): quiet.
        feed(
            &mut rate,
            &mut at,
            200.0,
            Duration::from_millis(5),
            Duration::from_secs(1),
        );
        assert!((rate.per_sec() - 200.0).abs() < 30.0, "{}", rate.per_sec());
        assert!(!rate.is_busy());
        // 2,000 rows/s, claimed every 2 ms: busy within a tenth of a second.
        feed(
            &mut rate,
            &mut at,
            2000.0,
            BUSY_PROBE,
            Duration::from_millis(100),
        );
        assert!(rate.is_busy(), "{}", rate.per_sec());
        // 400 rows/s: between the thresholds, so still busy.
        feed(
            &mut rate,
            &mut at,
            400.0,
            BUSY_PROBE,
            Duration::from_secs(1),
        );
        assert!(rate.is_busy(), "{}", rate.per_sec());
        // The rows stop: quiet again within ~0.2 s of empty probes.
        feed(
            &mut rate,
            &mut at,
            0.0,
            BUSY_PROBE,
            Duration::from_millis(200),
        );
        assert!(!rate.is_busy(), "{}", rate.per_sec());
        // 400 rows/s from quiet stays quiet.
        feed(
            &mut rate,
            &mut at,
            400.0,
            Duration::from_millis(5),
            Duration::from_secs(1),
        );
        assert!(!rate.is_busy(), "{}", rate.per_sec());
    }

    #[test]
    fn rounds_of_two_loops_at_the_same_instant_keep_the_rate_finite() {
        let mut rate = ArrivalRate::default();
        let at = Instant::now();
        rate.record(0, at);
        rate.record(10, at);
        // Each row found adds about 1 / TIME_CONSTANT to the rate, however short the interval.
        let expected = 10.0 / TIME_CONSTANT.as_secs_f64();
        assert!(
            (rate.per_sec() - expected).abs() < 1.0,
            "{}",
            rate.per_sec()
        );
        rate.record(20, at);
        assert!(
            rate.is_busy(),
            "thirty rows within an instant: {}",
            rate.per_sec()
        );
    }
}
