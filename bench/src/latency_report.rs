//! The report of `outboxd-bench --rate`: latency percentiles, where a round's time went (claims
//! and marks), and each counted row's latency cut into phases at the worker's store calls.

use std::fmt;
use std::time::{Duration, Instant};

use crate::samples::{Samples, ms, nearest_rank};
use crate::trace::SlowRows;

/// Latency percentiles of one run.
#[derive(Debug, Clone)]
pub struct LatencyReport {
    /// The database (password redacted).
    pub database: String,
    /// Rows/s asked for.
    pub rate: u32,
    /// One row every this long (`--every`), instead of `rate`.
    pub every: Option<Duration>,
    /// How long the worker idled before the producers started.
    pub quiet_first: Duration,
    /// What woke the worker's loops ([`Wake::kind`](outboxd::wake::Wake::kind)).
    pub wake: String,
    /// Rows committed.
    pub events: usize,
    /// Rows counted in the percentiles (those committed after [`WARM_UP`](crate::latency::WARM_UP)).
    pub counted: usize,
    /// Rows/s the producers reached: rows committed ÷ the time from the start to the last commit.
    pub achieved_rate: f64,
    /// The worker's poll interval.
    pub poll_interval: Duration,
    /// Whether a commit feed was connected when the producers started.
    pub commit_feed: bool,
    /// Commit → delivered, sorted ascending.
    pub latencies: Vec<Duration>,
    /// Where a round's time went: every claim and mark the worker made during the run.
    pub rounds: RoundTimes,
    /// Where the counted rows' latency went, phase by phase.
    pub phases: Phases,
    /// The slowest rows' waits for a claim (`--trace-slowest`; empty otherwise).
    pub slow_rows: SlowRows,
    /// The counted rows committed once the claims had caught up after the warm-up
    /// ([`crate::trace::caught_up`]): from when (after the start), and their latencies,
    /// sorted.
    pub steady: Option<(Duration, Vec<Duration>)>,
}

/// A counted row's latency cut at the worker's store calls, each phase sorted ascending: commit
/// → the start of the claim that handed it out (waiting for a claim: the wake, or a claim or
/// delivery already under way), that claim, its end → the start of the row's mark (waiting for
/// the batch before it to be marked, then the publish), and the mark.
#[derive(Debug, Clone, Default)]
pub struct Phases {
    /// Commit → claim start (zero when the claim began before the commit returned).
    pub to_claim: Vec<Duration>,
    /// The claim's own duration.
    pub claim: Vec<Duration>,
    /// Claim end → mark start.
    pub to_mark: Vec<Duration>,
    /// The mark's own duration.
    pub mark: Vec<Duration>,
}

impl Phases {
    pub(super) fn push(&mut self, committed: Instant, row: &RowTimes) {
        self.to_claim
            .push(row.claim.0.saturating_duration_since(committed));
        self.claim.push(row.claim.1 - row.claim.0);
        self.to_mark
            .push(row.mark.0.saturating_duration_since(row.claim.1));
        self.mark.push(row.mark.1 - row.mark.0);
    }

    pub(super) fn sort(&mut self) {
        for phase in [
            &mut self.to_claim,
            &mut self.claim,
            &mut self.to_mark,
            &mut self.mark,
        ] {
            phase.sort();
        }
    }
}

impl fmt::Display for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "per row p50/p90/p99 ms:")?;
        for (name, phase) in [
            ("commit→claim", &self.to_claim),
            ("claim", &self.claim),
            ("claim→mark", &self.to_mark),
            ("mark", &self.mark),
        ] {
            write!(
                f,
                " {name} {:.1}/{:.1}/{:.1};",
                ms(nearest_rank(phase, 50.0)),
                ms(nearest_rank(phase, 90.0)),
                ms(nearest_rank(phase, 99.0)),
            )?;
        }
        Ok(())
    }
}

/// When a delivered row's claim and mark started and returned.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowTimes {
    pub(super) claim: (Instant, Instant),
    pub(super) mark: (Instant, Instant),
}

/// The worker's store calls of one run, timed (claims that found nothing included).
#[derive(Debug, Clone, Default)]
pub struct RoundTimes {
    /// Each claim's duration and the rows it handed out.
    pub claims: Vec<(Duration, usize)>,
    /// Each mark's duration.
    pub marks: Vec<Duration>,
    /// From each claim's return to the next claim's start: the loop waiting (for the wake or the
    /// probe, or for a delivery to be marked before it may claim again).
    pub gaps: Vec<Duration>,
}

impl fmt::Display for RoundTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let claim_times: Samples = self.claims.iter().map(|(d, _)| *d).collect();
        let mark_times = Samples::new(self.marks.clone());
        let gaps = Samples::new(self.gaps.clone());
        let busy: Vec<usize> = self
            .claims
            .iter()
            .map(|(_, n)| *n)
            .filter(|n| *n > 0)
            .collect();
        let rows: usize = busy.iter().sum();
        write!(
            f,
            "claims: {} ({} found rows, {:.1} rows each), claim ms p50/p99 {:.1}/{:.1}, between claims ms p50/p99/3rd/2nd/max {:.1}/{:.1}/{:.1}/{:.1}/{:.1}; marks: {}, mark ms p50/p99 {:.1}/{:.1}",
            self.claims.len(),
            busy.len(),
            rows as f64 / busy.len().max(1) as f64,
            claim_times.ms(50.0),
            claim_times.ms(99.0),
            gaps.ms(50.0),
            gaps.ms(99.0),
            ms(gaps.largest(2)),
            ms(gaps.largest(1)),
            gaps.ms(100.0),
            mark_times.len(),
            mark_times.ms(50.0),
            mark_times.ms(99.0),
        )
    }
}

impl LatencyReport {
    /// The `p`-th percentile (0–100) of the latencies (nearest rank).
    pub fn percentile(&self, p: f64) -> Duration {
        nearest_rank(&self.latencies, p)
    }
}

impl fmt::Display for LatencyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "database: {}  poll_interval: {}  wake: {}  commit feed: {}",
            self.database,
            humantime::format_duration(self.poll_interval),
            self.wake,
            if self.commit_feed {
                "yes"
            } else {
                "no (adaptive probe)"
            }
        )?;
        if let Some(every) = self.every {
            writeln!(f, "one row every {}", humantime::format_duration(every))?;
        }
        if !self.quiet_first.is_zero() {
            writeln!(
                f,
                "after {} of quiet (every row counted)",
                humantime::format_duration(self.quiet_first)
            )?;
        }
        writeln!(
            f,
            "{:>6} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "rate", "events", "counted", "actual/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        )?;
        writeln!(
            f,
            "{:>6} {:>8} {:>8} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            self.rate,
            self.events,
            self.counted,
            self.achieved_rate,
            ms(self.percentile(50.0)),
            ms(self.percentile(90.0)),
            ms(self.percentile(99.0)),
            ms(self.percentile(100.0)),
        )?;
        if let Some((from, steady)) = &self.steady {
            writeln!(
                f,
                "steady: {} rows committed from +{:.0} ms (the first claim after the warm-up that came back short): p50 {:.1} ms, p99 {:.1} ms",
                steady.len(),
                ms(*from),
                ms(nearest_rank(steady, 50.0)),
                ms(nearest_rank(steady, 99.0)),
            )?;
        }
        writeln!(f, "{}", self.rounds)?;
        writeln!(f, "{}", self.phases)?;
        write!(f, "{}", self.slow_rows)
    }
}
