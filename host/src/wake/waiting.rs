//! Which loops of a [`super::Wake`] are waiting for work right now, and on what: a probe due
//! after some wait, or a wake-up (the poll interval as the safety net). What tests and
//! diagnostics read to know that a host has gone idle, so a quiet spell is a condition to wait
//! for, not a sleep.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The loops waiting, by worker id: `Some(at)` for a loop whose probe is due at `at`, `None` for
/// a loop sleeping until woken.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    loops: Mutex<BTreeMap<String, Option<Instant>>>,
}

impl Waiting {
    fn loops(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Option<Instant>>> {
        self.loops.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many loops are waiting.
    pub(super) fn count(&self) -> usize {
        self.loops().len()
    }

    /// How long until the first probe a waiting loop has planned; `None` when no waiting loop
    /// probes.
    pub(super) fn next_probe_in(&self) -> Option<Duration> {
        let first = self.loops().values().flatten().min().copied()?;
        Some(first.saturating_duration_since(Instant::now()))
    }
}

/// A loop's wait, recorded while it lasts (dropped: the loop is no longer waiting).
#[derive(Debug)]
pub struct WaitRecord {
    waiting: Arc<Waiting>,
    loop_id: String,
}

impl WaitRecord {
    pub(super) fn new(waiting: Arc<Waiting>, loop_id: &str, probe: Option<Instant>) -> WaitRecord {
        waiting.loops().insert(loop_id.to_string(), probe);
        WaitRecord {
            waiting,
            loop_id: loop_id.to_string(),
        }
    }
}

impl Drop for WaitRecord {
    fn drop(&mut self) {
        self.waiting.loops().remove(&self.loop_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_counted_while_their_records_live() {
        let waiting = Arc::new(Waiting::default());
        let soon = Instant::now() + Duration::from_secs(40);
        let probing = WaitRecord::new(waiting.clone(), "n/0", Some(soon));
        let later = WaitRecord::new(waiting.clone(), "n/2", Some(soon + Duration::from_secs(9)));
        let asleep = WaitRecord::new(waiting.clone(), "n/1", None);
        assert_eq!(waiting.count(), 3);
        let next = waiting.next_probe_in().expect("two loops probe");
        assert!(
            next <= Duration::from_secs(40) && next > Duration::from_secs(39),
            "{next:?}"
        );
        drop(probing);
        drop(later);
        assert_eq!(waiting.count(), 1);
        assert_eq!(waiting.next_probe_in(), None);
        drop(asleep);
        assert_eq!(waiting.count(), 0);
    }
}
