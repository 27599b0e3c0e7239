//! Per-room order within a batch: a partition's batch may hold many events of a room, and a sink
//! may publish a call's events side by side (the webhook plugin sends them at once). So the batch
//! is published in waves: wave *n* holds the *n*-th event of each room, and a wave is published
//! once the one before it has answered. A room whose event was not delivered (retryable, or
//! deferred by an open breaker) sends none of its later events: they go back `retryable` untried
//! (no attempt spent), behind it. A plugin thus never sees two events of one room in one call.
//!
//! [`publish_in_waves`] runs the waves through any publish function: each layer that can run
//! them cheaper hands them down (a plugin sink runs a batch's waves on the plugin runtime, one
//! hop there and back for the batch, not one per wave).

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use super::{Event, Outcome, Publisher};

/// Why a room's later event was not tried.
pub const HELD_BEHIND: &str = "not tried: an earlier event of its room was not delivered";

/// Why an event was not tried when the batch ran out of time.
pub const OUT_OF_TIME: &str =
    "not tried: the batch's publish deadline (worker.publish_timeout) passed before its turn";

/// The waves of the events whose rooms are `rooms`: for each, the positions of the `n`-th event
/// of every room, in batch order (a room's events keep their order across waves).
fn waves_of_rooms(rooms: &RoomNumbers) -> Vec<Vec<usize>> {
    let mut seen = vec![0usize; rooms.count];
    let mut waves: Vec<Vec<usize>> = Vec::new();
    for (position, &room) in rooms.of.iter().enumerate() {
        let n = seen[room];
        if waves.len() <= n {
            waves.push(Vec::new());
        }
        waves[n].push(position);
        seen[room] += 1;
    }
    waves
}

/// Publishes `events` in per-room waves (see the module docs) within `timeout`: one outcome per
/// event, in order.
///
/// `publish` publishes the events at the positions it is given (one per room, in batch order)
/// and answers one outcome per position. A wave still running when `timeout` passes is dropped
/// and its events are retryable; the waves after it are not tried ([`OUT_OF_TIME`]).
pub async fn publish_in_waves<F, Fut>(
    events: &[Event],
    timeout: Duration,
    mut publish: F,
) -> Vec<Outcome>
where
    F: FnMut(Vec<usize>) -> Fut,
    Fut: Future<Output = Vec<Outcome>>,
{
    let deadline = Instant::now() + timeout;
    let mut outcomes: Vec<Option<Outcome>> = vec![None; events.len()];
    let rooms = room_numbers(events);
    let mut room_held = vec![false; rooms.count];
    for wave in waves_of_rooms(&rooms) {
        let (send, behind): (Vec<usize>, Vec<usize>) =
            wave.into_iter().partition(|&p| !room_held[rooms.of[p]]);
        for p in behind {
            outcomes[p] = Some(Outcome::deferred(HELD_BEHIND, Duration::ZERO));
        }
        if send.is_empty() {
            continue;
        }
        if Instant::now() >= deadline {
            for p in send {
                room_held[rooms.of[p]] = true;
                outcomes[p] = Some(Outcome::deferred(OUT_OF_TIME, Duration::ZERO));
            }
            continue;
        }
        let answered = match tokio::time::timeout_at(deadline.into(), publish(send.clone())).await {
            Ok(answered) if answered.len() == send.len() => answered,
            Ok(answered) => {
                let message = format!(
                    "publisher returned {} results for {} events",
                    answered.len(),
                    send.len()
                );
                vec![Outcome::retryable(message); send.len()]
            }
            Err(_) => vec![Outcome::retryable(timed_out(timeout)); send.len()],
        };
        for (p, outcome) in send.into_iter().zip(answered) {
            if matches!(
                outcome,
                Outcome::Retryable { .. } | Outcome::Deferred { .. }
            ) {
                room_held[rooms.of[p]] = true;
            }
            outcomes[p] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| {
                Outcome::retryable("the publisher gave no result for this event")
            })
        })
        .collect()
}

/// [`publish_in_waves`] with each wave published by `publisher`'s [`Publisher::publish`] (the
/// wave's events copied into a batch of their own).
pub async fn publish_each_wave<P: Publisher + ?Sized>(
    publisher: &P,
    events: &[Event],
    timeout: Duration,
) -> Vec<Outcome> {
    publish_in_waves(events, timeout, |positions| {
        let wave: Vec<Event> = positions.iter().map(|&p| events[p].clone()).collect();
        async move { publisher.publish(&wave).await }
    })
    .await
}

/// The reason given to the events of a wave still publishing when `timeout` passed.
pub fn timed_out(timeout: Duration) -> String {
    format!(
        "publish timed out after {} (worker.publish_timeout)",
        humantime::format_duration(timeout)
    )
}

/// Each event's room as a small number (`of`, by position), and how many rooms there are.
struct RoomNumbers {
    of: Vec<usize>,
    count: usize,
}

fn room_numbers(events: &[Event]) -> RoomNumbers {
    let mut numbers: HashMap<&str, usize> = HashMap::with_capacity(events.len().min(1024));
    let of = events
        .iter()
        .map(|event| {
            let next = numbers.len();
            *numbers.entry(event.room_id.as_str()).or_insert(next)
        })
        .collect();
    RoomNumbers {
        of,
        count: numbers.len(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn event(id: &str, room: &str) -> Event {
        crate::publish::test_event(id, "t", room)
    }

    fn batch() -> Vec<Event> {
        vec![
            event("a1", "a"),
            event("b1", "b"),
            event("a2", "a"),
            event("a3", "a"),
            event("c1", "c"),
            event("b2", "b"),
        ]
    }

    #[test]
    fn each_wave_holds_one_event_per_room_in_order() {
        let waves_of = |events: &[Event]| waves_of_rooms(&room_numbers(events));
        assert_eq!(waves_of(&batch()), vec![vec![0, 1, 4], vec![2, 5], vec![3]]);
        assert!(waves_of(&[]).is_empty());
    }

    #[tokio::test]
    async fn a_room_whose_event_was_not_delivered_sends_none_of_its_later_ones() {
        let events = batch();
        let calls = Mutex::new(Vec::new());
        let outcomes = publish_in_waves(&events, Duration::from_secs(5), |positions| {
            calls.lock().unwrap().push(positions.clone());
            let answers: Vec<Outcome> = positions
                .iter()
                .map(|&p| match events[p].event_id.as_str() {
                    "a2" => Outcome::retryable("down"),
                    "c1" => Outcome::permanent("bad"),
                    _ => Outcome::Delivered,
                })
                .collect();
            async move { answers }
        })
        .await;
        assert_eq!(*calls.lock().unwrap(), vec![vec![0, 1, 4], vec![2, 5]]);
        assert_eq!(outcomes[0], Outcome::Delivered);
        assert_eq!(outcomes[2], Outcome::retryable("down"));
        assert_eq!(outcomes[3], Outcome::deferred(HELD_BEHIND, Duration::ZERO));
        assert_eq!(outcomes[4], Outcome::permanent("bad"));
        assert_eq!(outcomes[5], Outcome::Delivered);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wave_past_the_deadline_is_retryable_and_the_later_ones_are_not_tried() {
        let events = batch();
        let outcomes = publish_in_waves(&events, Duration::from_secs(1), |positions| async move {
            if positions.len() == 2 {
                std::future::pending::<()>().await;
            }
            vec![Outcome::Delivered; positions.len()]
        })
        .await;
        assert_eq!(outcomes[0], Outcome::Delivered);
        assert_eq!(
            outcomes[2],
            Outcome::retryable(timed_out(Duration::from_secs(1)))
        );
        assert_eq!(
            outcomes[5],
            Outcome::retryable(timed_out(Duration::from_secs(1)))
        );
        assert_eq!(outcomes[3], Outcome::deferred(HELD_BEHIND, Duration::ZERO));
    }

    #[tokio::test]
    async fn a_wrong_number_of_results_fails_that_wave() {
        let events = batch();
        let outcomes = publish_in_waves(&events, Duration::from_secs(5), |_| async {
            vec![Outcome::Delivered]
        })
        .await;
        assert!(
            outcomes[..2]
                .iter()
                .all(|o| matches!(o, Outcome::Retryable { .. }))
        );
        assert_eq!(outcomes[2], Outcome::deferred(HELD_BEHIND, Duration::ZERO));
    }
}
