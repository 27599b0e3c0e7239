//! `outboxd-bench --rate N --seconds S --trace-slowest K`: for the K counted rows that waited
//! longest between their producer's commit and the start of the claim that handed them out, the
//! claims the worker ran meanwhile (when each started, how long it took, how many rows it handed
//! out and how many it asked for).
//!
//! It tells a row a claim could not see (claims ran, came back short of their limit, and did not
//! hand it out: skipped as locked, or not yet visible) from a row that waited for a claim (one
//! long claim or gap spans the wait); the marks that ran during the wait show whether the loop
//! was waiting for one (a loop claims again only once at most one batch is still delivering).

use std::fmt;
use std::time::{Duration, Instant};

/// One claim of the worker during a latency run.
#[derive(Debug, Clone, Copy)]
pub struct ClaimSpan {
    /// When the claim was called.
    pub start: Instant,
    /// When it returned.
    pub end: Instant,
    /// Rows it handed out (rejected rows included).
    pub rows: usize,
    /// Rows it asked for.
    pub limit: u32,
}

/// A counted row: when its producer's commit returned and when the claim that handed it out
/// started.
#[derive(Debug, Clone, Copy)]
pub struct RowWait {
    /// The producer's commit returned.
    pub committed: Instant,
    /// The claim that handed the row out started.
    pub claimed: Instant,
}

/// The slowest rows of a run, with the claims that ran while each waited.
#[derive(Debug, Clone, Default)]
pub struct SlowRows {
    rows: Vec<SlowRow>,
    /// Rows passed over: a claim started after the row's commit and returned short of its
    /// limit without it (the row was locked or not visible to it), yet a later claim handed it
    /// out.
    passed_over: usize,
    /// Rows looked at.
    of: usize,
}

#[derive(Debug, Clone)]
struct SlowRow {
    /// Commit, ms after the run's start.
    committed_ms: f64,
    /// Commit → start of its claim.
    waited: Duration,
    /// Claims that returned after the commit and started no later than the row's own claim,
    /// in order (the last one is the row's): start (ms after the run's start), duration, rows,
    /// limit.
    claims: Vec<(f64, Duration, usize, u32)>,
    /// Marks that ran during the wait: start (ms after the run's start), duration.
    marks: Vec<(f64, Duration)>,
}

impl SlowRows {
    /// The `count` rows of `rows` with the longest commit → claim wait, each with the claims of
    /// `claims` that overlapped its wait; times are shown relative to `started`.
    /// `marks` are the marks' (start, return), listed when they overlap the wait.
    pub fn find(
        rows: &[RowWait],
        claims: &[ClaimSpan],
        marks: &[(Instant, Instant)],
        started: Instant,
        count: usize,
    ) -> SlowRows {
        let ms = |at: Instant| at.saturating_duration_since(started).as_secs_f64() * 1000.0;
        let mut by_wait: Vec<&RowWait> = rows.iter().collect();
        by_wait.sort_by_key(|row| {
            std::cmp::Reverse(row.claimed.saturating_duration_since(row.committed))
        });
        let passed_over = rows
            .iter()
            .filter(|row| {
                claims.iter().any(|c| {
                    c.start > row.committed && c.start < row.claimed && c.rows < c.limit as usize
                })
            })
            .count();
        let of = rows.len();
        let rows = by_wait
            .into_iter()
            .take(count)
            .map(|row| SlowRow {
                committed_ms: ms(row.committed),
                waited: row.claimed.saturating_duration_since(row.committed),
                claims: claims
                    .iter()
                    .filter(|c| c.end > row.committed && c.start <= row.claimed)
                    .map(|c| (ms(c.start), c.end - c.start, c.rows, c.limit))
                    .collect(),
                marks: marks
                    .iter()
                    .filter(|(start, end)| *end > row.committed && *start < row.claimed)
                    .map(|(start, end)| (ms(*start), *end - *start))
                    .collect(),
            })
            .collect();
        SlowRows {
            rows,
            passed_over,
            of,
        }
    }
}

impl fmt::Display for SlowRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = crate::samples::ms;
        if self.rows.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "rows passed over by a claim that started after their commit and came back short: {} of {}",
            self.passed_over, self.of
        )?;
        for row in &self.rows {
            write!(
                f,
                "slow row: committed at +{:.1} ms, waited {:.1} ms for its claim; claims meanwhile (start +ms, took ms, rows/limit):",
                row.committed_ms,
                ms(row.waited)
            )?;
            for (start, took, rows, limit) in &row.claims {
                write!(f, " +{start:.1} {:.1} {rows}/{limit};", ms(*took))?;
            }
            write!(f, " marks meanwhile (start +ms, took ms):")?;
            for (start, took) in &row.marks {
                write!(f, " +{start:.1} {:.1};", ms(*took))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// When the claims caught up after `from` (the end of the warm-up): the start of the first claim
/// starting at or after it that came back short of its limit. Rows committed before then queued
/// behind the step from idle (a backlog claimed in full batches), not at the steady rate.
pub fn caught_up(claims: &[ClaimSpan], from: Instant) -> Option<Instant> {
    claims
        .iter()
        .find(|c| c.start >= from && c.rows < c.limit as usize)
        .map(|c| c.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_the_claims_between_a_slow_rows_commit_and_its_claim() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let claims = [
            ClaimSpan {
                start: at(0),
                end: at(2),
                rows: 3,
                limit: 500,
            },
            ClaimSpan {
                start: at(5),
                end: at(7),
                rows: 2,
                limit: 500,
            },
            ClaimSpan {
                start: at(10),
                end: at(12),
                rows: 4,
                limit: 500,
            },
            ClaimSpan {
                start: at(20),
                end: at(21),
                rows: 1,
                limit: 500,
            },
        ];
        let rows = [
            RowWait {
                committed: at(1),
                claimed: at(10),
            },
            RowWait {
                committed: at(4),
                claimed: at(5),
            },
        ];
        let marks = [(at(3), at(9)), (at(12), at(14))];
        let slow = SlowRows::find(&rows, &claims, &marks, t0, 1);
        let text = slow.to_string();
        assert!(
            text.contains("committed at +1.0 ms, waited 9.0 ms"),
            "{text}"
        );
        // The claim running at the commit, the one that came back without it, and its own.
        assert!(
            text.contains("+0.0 2.0 3/500; +5.0 2.0 2/500; +10.0 2.0 4/500;"),
            "{text}"
        );
        assert!(!text.contains("+20.0"), "{text}");
        assert!(
            text.contains("marks meanwhile (start +ms, took ms): +3.0 6.0;\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "passed over by a claim that started after their commit and came back short: 1 of 2"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn caught_up_at_the_first_short_claim_after_the_warm_up() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let claim = |start, rows| ClaimSpan {
            start: at(start),
            end: at(start + 1),
            rows,
            limit: 500,
        };
        let claims = [
            claim(5, 3),
            claim(1000, 500),
            claim(1050, 500),
            claim(1100, 40),
        ];
        assert_eq!(caught_up(&claims, at(1000)), Some(at(1100)));
        assert_eq!(caught_up(&claims, at(1101)), None);
    }
}
