//! How far one worker loop reads ahead of its deliveries ([`ClaimAhead`]).
//!
//! Where the database runs writers side by side, a loop reads (another owned partition) while
//! its earlier batches publish and mark, so the reads and the marks run at the same time, as two
//! plain clients' would. A loop publishes one batch at a time, in read order, and a batch
//! publishes once the one before it is published; a batch read ahead waits for its turn.
//!
//! With one batch claimed ahead, every round ends on a barrier: the next claim starts only when
//! the batch being marked is done, so whenever a claim and a mark take different times (they
//! vary from batch to batch), one of the two statements waits for the other. With two, the
//! claims run on while the marks catch up: measured on PostgreSQL and MariaDB (the git history of
//! docs/PERFORMANCE.md, "Claim-ahead depth"), a drain through one loop ran 1.26× (PostgreSQL) and
//! 1.07× (MariaDB) as fast as with one.
//!
//! A batch read two ahead waits behind two deliveries, holding its partition's turn (no other
//! loop reads that partition meanwhile). So the second batch is read only while deliveries are
//! quick: while two deliveries as long as the last one fit in the lease less a whole publish and
//! its mark. Behind a slow sink the loop reads one batch ahead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Claims ahead of a loop's deliveries: 0 on SQLite (one writer: a claim would queue behind
/// the mark), else 2 while deliveries are quick and 1 behind a slow one.
#[derive(Debug)]
pub(super) struct ClaimAhead {
    /// Most claims ahead: 0 or 2.
    most: usize,
    /// How long a batch claimed ahead may wait for its turn and still publish within its lease:
    /// the lease less the publish deadline and the margin for the mark.
    wait_budget: Duration,
    /// How long the loop's last delivery (publish and mark) took, in microseconds.
    last_delivery_us: AtomicU64,
}

impl ClaimAhead {
    /// The depth of a loop whose store runs writers side by side (`concurrent_writers`) or not,
    /// for batches that wait at most `wait_budget` for their turn.
    pub(super) fn new(concurrent_writers: bool, wait_budget: Duration) -> ClaimAhead {
        ClaimAhead {
            most: if concurrent_writers { 2 } else { 0 },
            wait_budget,
            last_delivery_us: AtomicU64::new(0),
        }
    }

    /// How many deliveries a claim may overlap now: a loop claims only while fewer than this
    /// many of its batches are delivering (publishing, marking or waiting for their turn).
    pub(super) fn depth(&self) -> usize {
        let last = Duration::from_micros(self.last_delivery_us.load(Ordering::Relaxed));
        if self.most >= 2
            && (self.wait_budget.is_zero() || last.saturating_mul(2) > self.wait_budget)
        {
            1
        } else {
            self.most
        }
    }

    /// Notes how long a delivery (its publish and its mark, from its turn) took.
    pub(super) fn delivered_in(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.last_delivery_us.store(us, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_never_claims_ahead() {
        let ahead = ClaimAhead::new(false, Duration::from_secs(9));
        assert_eq!(ahead.depth(), 0);
        ahead.delivered_in(Duration::from_secs(30));
        assert_eq!(ahead.depth(), 0);
    }

    #[test]
    fn two_ahead_while_deliveries_are_quick() {
        let ahead = ClaimAhead::new(true, Duration::from_secs(9));
        assert_eq!(ahead.depth(), 2, "before any delivery");
        ahead.delivered_in(Duration::from_millis(40));
        assert_eq!(ahead.depth(), 2);
        ahead.delivered_in(Duration::from_millis(4_500));
        assert_eq!(ahead.depth(), 2, "two such waits still fit the budget");
    }

    #[test]
    fn one_ahead_behind_a_slow_delivery_and_two_again_after_a_quick_one() {
        let ahead = ClaimAhead::new(true, Duration::from_secs(9));
        ahead.delivered_in(Duration::from_millis(4_501));
        assert_eq!(ahead.depth(), 1);
        ahead.delivered_in(Duration::from_millis(30));
        assert_eq!(ahead.depth(), 2);
    }

    #[test]
    fn no_budget_means_one_ahead() {
        let ahead = ClaimAhead::new(true, Duration::ZERO);
        assert_eq!(ahead.depth(), 1);
        ahead.delivered_in(Duration::ZERO);
        assert_eq!(ahead.depth(), 1);
    }
}
