//! [`SwappablePublisher`]: the publisher the worker holds across hot reloads. Each batch takes
//! the current set once, so a batch in flight finishes on the set it started with, and every
//! batch started after a swap goes to the new set. It hands the set's results on part by part
//! (each sink's as that sink answers), as the set itself does.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::mpsc;
use futures::future;
use futures::stream::{self, BoxStream, StreamExt};

use crate::publish::{Answered, Event, Outcome, Publisher};

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

    async fn publish_in_waves(&self, batch: &[Event], timeout: Duration) -> Vec<Outcome> {
        let publisher = self.current();
        publisher.publish_in_waves(batch, timeout).await
    }

    fn sink_for(&self, event_type: &str) -> Option<String> {
        self.current().sink_for(event_type)
    }

    /// The current set's parts, each handed on as soon as the set yields it (not gathered into
    /// one answer: a slow sink must not hold up the marks of the others).
    fn publish_parts<'a>(&'a self, batch: &'a [Event]) -> BoxStream<'a, Answered> {
        let publisher = self.current();
        let (parts_tx, parts_rx) = mpsc::unbounded();
        // Drives the set's stream (which borrows the set this future owns) into the channel.
        let drive = async move {
            let mut parts = publisher.publish_parts(batch);
            while let Some(part) = parts.next().await {
                if parts_tx.unbounded_send(part).is_err() {
                    break;
                }
            }
        };
        let drive = stream::once(drive).filter_map(|()| future::ready(None));
        stream::select(parts_rx, drive).boxed()
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
            trace: None,
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

    /// Answers position 0 at once and position 1 only when `release` is notified.
    struct TwoParts {
        release: Arc<tokio::sync::Notify>,
    }

    #[async_trait]
    impl Publisher for TwoParts {
        async fn publish(&self, _batch: &[Event]) -> Vec<Outcome> {
            unreachable!("the swap must forward publish_parts")
        }

        fn publish_parts<'a>(&'a self, _batch: &'a [Event]) -> BoxStream<'a, Answered> {
            let quick = stream::once(async { vec![(0, Outcome::Delivered)] });
            let slow = stream::once(async move {
                self.release.notified().await;
                vec![(1, Outcome::Delivered)]
            });
            quick.chain(slow).boxed()
        }
    }

    #[tokio::test]
    async fn each_part_is_handed_on_before_the_slow_one_answers() {
        let release = Arc::new(tokio::sync::Notify::new());
        let swappable = SwappablePublisher::new(Arc::new(TwoParts {
            release: release.clone(),
        }));
        let batch = [event(), event()];
        let mut parts = swappable.publish_parts(&batch);
        let first = tokio::time::timeout(std::time::Duration::from_secs(5), parts.next())
            .await
            .expect("the quick part arrives while the slow one is pending");
        assert_eq!(first, Some(vec![(0, Outcome::Delivered)]));
        release.notify_one();
        assert_eq!(parts.next().await, Some(vec![(1, Outcome::Delivered)]));
        assert_eq!(parts.next().await, None);
    }
}
