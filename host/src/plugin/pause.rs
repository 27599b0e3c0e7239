//! Pausing a sink at runtime (the console's Sinks page): while a sink is paused, every batch for
//! it is answered [`Outcome::Deferred`] without calling the plugin, so its events go back to
//! `retryable` without spending an attempt (as while its circuit breaker is open) and come back
//! every [`PAUSED_RETRY`] until it is resumed; the other sinks keep flowing.
//!
//! [`SinkControls`] is the one switchboard of a host: shared by every sink set a reload starts,
//! so a reload never resumes a paused sink.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::publish::{Event, Outcome, Publisher};

/// How long a paused sink's events wait before they are claimed again (and deferred again while
/// it is still paused): at most this long after a resume they flow.
pub const PAUSED_RETRY: Duration = Duration::from_secs(5);

/// Who paused a sink, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    /// Who asked (the console's peer address and how it was authorised).
    pub by: String,
    /// When, UTC ms.
    pub since_ms: i64,
}

/// Which sinks are paused, by name.
#[derive(Debug, Default)]
pub struct SinkControls {
    paused: Mutex<BTreeMap<String, Paused>>,
}

impl SinkControls {
    /// Nothing paused.
    pub fn new() -> Arc<SinkControls> {
        Arc::new(SinkControls::default())
    }

    /// Pauses `sink`; `false` when it was paused already (the first pause is kept).
    pub fn pause(&self, sink: &str, paused: Paused) -> bool {
        let Ok(mut map) = self.paused.lock() else {
            return false;
        };
        if map.contains_key(sink) {
            return false;
        }
        map.insert(sink.to_string(), paused);
        true
    }

    /// Resumes `sink`; `false` when it was not paused.
    pub fn resume(&self, sink: &str) -> bool {
        self.paused
            .lock()
            .is_ok_and(|mut map| map.remove(sink).is_some())
    }

    /// Whether `sink` is paused, and by whom.
    pub fn paused(&self, sink: &str) -> Option<Paused> {
        self.paused.lock().ok()?.get(sink).cloned()
    }
}

/// A sink's publisher behind its pause switch.
pub struct PauseGate {
    name: Arc<str>,
    inner: Arc<dyn Publisher>,
    controls: Arc<SinkControls>,
}

impl PauseGate {
    /// Wraps `inner`, the publisher of sink `name`, switched by `controls`.
    pub fn new(name: &str, inner: Arc<dyn Publisher>, controls: Arc<SinkControls>) -> PauseGate {
        PauseGate {
            name: Arc::from(name),
            inner,
            controls,
        }
    }
}

#[async_trait]
impl Publisher for PauseGate {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        if self.controls.paused(&self.name).is_none() {
            return self.inner.publish(batch).await;
        }
        let message = format!(
            "sink `{}` is paused (console); waiting without spending an attempt",
            self.name
        );
        vec![Outcome::deferred(message, PAUSED_RETRY); batch.len()]
    }

    async fn publish_in_waves(&self, batch: &[Event], timeout: Duration) -> Vec<Outcome> {
        if self.controls.paused(&self.name).is_none() {
            return self.inner.publish_in_waves(batch, timeout).await;
        }
        self.publish(batch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Deliver;

    #[async_trait]
    impl Publisher for Deliver {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            vec![Outcome::Delivered; batch.len()]
        }
    }

    fn event() -> Event {
        Event {
            app_code: "a".into(),
            event_id: "e".into(),
            event_type: "T".into(),
            room_id: "r".into(),
            room_version: 1,
            occurred_at_ms: 0,
            body: Vec::new(),
            attempt: 1,
            trace: None,
        }
    }

    #[tokio::test]
    async fn a_paused_sink_defers_and_a_resumed_one_publishes() {
        let controls = SinkControls::new();
        let gate = PauseGate::new("hook", Arc::new(Deliver), controls.clone());
        assert_eq!(gate.publish(&[event()]).await, vec![Outcome::Delivered]);
        let by = Paused {
            by: "127.0.0.1 (token)".into(),
            since_ms: 1,
        };
        assert!(controls.pause("hook", by.clone()));
        assert!(!controls.pause("hook", by.clone()), "already paused");
        assert_eq!(controls.paused("hook"), Some(by));
        let outcomes = gate.publish(&[event(), event()]).await;
        assert_eq!(outcomes.len(), 2);
        assert!(
            matches!(&outcomes[0], Outcome::Deferred { message, wait } if message.contains("paused") && *wait == PAUSED_RETRY),
            "{outcomes:?}"
        );
        assert!(controls.resume("hook"));
        assert!(!controls.resume("hook"));
        assert_eq!(gate.publish(&[event()]).await, vec![Outcome::Delivered]);
    }
}
