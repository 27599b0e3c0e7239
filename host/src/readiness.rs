//! [`Readiness`]: whether this host can serve (`/readyz`): the database answered the last status
//! refresh, every sink has started and every `[[broker]]` connection is up; and what wakes idle
//! loops, for the `/readyz` body.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Whether this host can serve: the database answers and every sink has started.
#[derive(Debug, Default)]
pub struct Readiness {
    sinks_started: AtomicBool,
    /// `None` before the first refresh; `Some(Err(reason))` while the database fails.
    database: Mutex<Option<Result<(), String>>>,
    /// What wakes idle loops, for the `/readyz` body (not a condition of readiness: loops probe
    /// while a feed is down).
    wake: Mutex<Option<String>>,
    /// The `[[broker]]` connections that are down, each as `broker `NAME` (KIND): REASON`.
    brokers_down: Mutex<Vec<String>>,
}

impl Readiness {
    /// A readiness with nothing checked yet (not ready).
    pub fn new() -> Arc<Readiness> {
        Arc::new(Readiness::default())
    }

    /// Records that every sink has started (or, `false`, that the sinks are being replaced).
    pub fn set_sinks_started(&self, started: bool) {
        self.sinks_started.store(started, Ordering::SeqCst);
    }

    /// Records the outcome of the latest database check.
    pub fn set_database(&self, outcome: Result<(), String>) {
        if let Ok(mut database) = self.database.lock() {
            *database = Some(outcome);
        }
    }

    /// Records what wakes idle loops and whether its feed is connected, e.g.
    /// `binlog (connected)` or `probe (log_bin is OFF)`.
    pub fn set_wake(&self, wake: String) {
        if let Ok(mut slot) = self.wake.lock() {
            *slot = Some(wake);
        }
    }

    /// Records which `[[broker]]` connections are down (empty: all connected).
    pub fn set_brokers_down(&self, down: Vec<String>) {
        if let Ok(mut slot) = self.brokers_down.lock() {
            *slot = down;
        }
    }

    /// What wakes idle loops, as last recorded.
    pub fn wake(&self) -> Option<String> {
        self.wake.lock().ok().and_then(|w| w.clone())
    }

    /// `Ok` when ready, else the reason (for the 503 body).
    pub fn check(&self) -> Result<(), String> {
        let database = self
            .database
            .lock()
            .map(|d| d.clone())
            .unwrap_or_else(|_| Some(Err("readiness state poisoned".into())));
        match database {
            None => return Err("database not checked yet".into()),
            Some(Err(reason)) => return Err(format!("database unreachable: {reason}")),
            Some(Ok(())) => {}
        }
        if !self.sinks_started.load(Ordering::SeqCst) {
            return Err("sinks not started".into());
        }
        let down = self
            .brokers_down
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        if !down.is_empty() {
            return Err(format!("not connected: {}", down.join("; ")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_database_and_sinks() {
        let readiness = Readiness::new();
        assert_eq!(readiness.check().unwrap_err(), "database not checked yet");
        readiness.set_database(Ok(()));
        assert_eq!(readiness.check().unwrap_err(), "sinks not started");
        readiness.set_sinks_started(true);
        assert!(readiness.check().is_ok());
        readiness.set_database(Err("connection refused".into()));
        assert_eq!(
            readiness.check().unwrap_err(),
            "database unreachable: connection refused"
        );
    }
}
