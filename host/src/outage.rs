//! [`Outage`]: something the host depends on that went away and came back (the database, a
//! commit feed, a `[[broker]]` connection). The one place that decides when such lines are
//! logged: once when it goes (not at every retry), counted while it lasts, and once when it comes
//! back, with how long it was gone. Each user writes its own lines (their messages and fields are
//! what operators and tests read); this type only says when.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One dependency's current outage, if any. Shared by whoever fails and recovers on it.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    down: Mutex<Option<Down>>,
}

/// An outage under way.
#[derive(Debug, Clone, Copy)]
struct Down {
    since: Instant,
    failures: u64,
}

/// An outage that ended: how long it lasted and the failures counted meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutageEnded {
    /// From the first failure to the recovery, in whole milliseconds.
    pub(crate) lasted: Duration,
    /// Failures counted, the first one included.
    pub(crate) failures: u64,
}

impl OutageEnded {
    /// The length as logs write it (`1s 250ms`).
    pub(crate) fn lasted_text(&self) -> humantime::FormattedDuration {
        humantime::format_duration(self.lasted)
    }
}

impl Outage {
    /// No outage.
    pub(crate) fn new() -> Outage {
        Outage::default()
    }

    /// Counts a failure. `log_first` runs when this failure begins an outage, and only then.
    pub(crate) fn failed(&self, log_first: impl FnOnce()) {
        let mut down = self.lock();
        match down.as_mut() {
            Some(down) => down.failures += 1,
            None => {
                *down = Some(Down {
                    since: Instant::now(),
                    failures: 1,
                });
                log_first();
            }
        }
    }

    /// A success: ends the outage if there is one, running `log_back` with how it went. Returns
    /// whether an outage ended.
    pub(crate) fn recovered(&self, log_back: impl FnOnce(OutageEnded)) -> bool {
        let Some(down) = self.lock().take() else {
            return false;
        };
        log_back(OutageEnded {
            lasted: Duration::from_millis(down.since.elapsed().as_millis() as u64),
            failures: down.failures,
        });
        true
    }

    /// Whether an outage is under way.
    #[cfg(test)]
    fn is_down(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Down>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_logged_once_and_the_recovery_once_with_the_count() {
        let outage = Outage::new();
        let mut firsts = 0;
        for _ in 0..3 {
            outage.failed(|| firsts += 1);
        }
        assert_eq!(firsts, 1);
        assert!(outage.is_down());
        let mut ended = None;
        assert!(outage.recovered(|e| ended = Some(e)));
        assert_eq!(ended.map(|e| e.failures), Some(3));
        assert!(!outage.is_down());
        assert!(!outage.recovered(|_| panic!("no outage to end")));
        outage.failed(|| firsts += 1);
        assert_eq!(firsts, 2, "a new outage is logged again");
    }

    #[test]
    fn the_length_runs_from_the_first_failure() {
        let outage = Outage::new();
        outage.failed(|| {});
        std::thread::sleep(Duration::from_millis(20));
        outage.failed(|| {});
        let mut lasted = Duration::ZERO;
        outage.recovered(|e| lasted = e.lasted);
        assert!(lasted >= Duration::from_millis(20), "{lasted:?}");
        assert_eq!(lasted.subsec_nanos() % 1_000_000, 0, "whole milliseconds");
    }
}
