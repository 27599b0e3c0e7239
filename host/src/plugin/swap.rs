//! [`SwappablePublisher`]: the publisher the worker holds across hot reloads. Each batch takes
//! the current set once, so a batch in flight finishes on the set it started with, and every
//! batch started after a swap goes to the new set.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;

use crate::publish::{Event, Outcome, Publisher};

/// A publisher whose inner set can be replaced atomically.
pub struct SwappablePublisher {
    current: RwLock<Arc<dyn Publisher>>,
}

impl SwappablePublisher {
    /// Starts with `initial`.
    pub fn new(initial: Arc<dyn Publisher>) -> SwappablePublisher {
        SwappablePublisher {
            current: RwLock::new(initial),
        }
    }

    /// The set new batches go to.
    pub fn current(&self) -> Arc<dyn Publisher> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Makes `next` the set for every batch started from now on; returns the previous set
    /// (batches still holding it finish on it, then it drops).
    pub fn swap(&self, next: Arc<dyn Publisher>) -> Arc<dyn Publisher> {
        let mut current = match self.current.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::replace(&mut *current, next)
    }
}

#[async_trait]
impl Publisher for SwappablePublisher {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        let publisher = self.current();
        publisher.publish(batch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Outcome);

    #[async_trait]
    impl Publisher for Fixed {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            vec![self.0.clone(); batch.len()]
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
        }
    }

    #[tokio::test]
    async fn batches_after_a_swap_go_to_the_new_set() {
        let swappable = SwappablePublisher::new(Arc::new(Fixed(Outcome::Delivered)));
        assert_eq!(
            swappable.publish(&[event()]).await,
            vec![Outcome::Delivered]
        );
        let old = swappable.swap(Arc::new(Fixed(Outcome::permanent("new"))));
        assert_eq!(old.publish(&[event()]).await, vec![Outcome::Delivered]);
        assert_eq!(
            swappable.publish(&[event()]).await,
            vec![Outcome::permanent("new")]
        );
    }
}
