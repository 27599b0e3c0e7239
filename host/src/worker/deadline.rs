//! The publish deadline of a batch: publish it through
//! [`Publisher::publish_parts`](crate::publish::Publisher::publish_parts), take each sink's part
//! as it comes, stop at `worker.publish_timeout`, and answer the events left unanswered then
//! (or when the publisher ends without them) as retryable.

use futures::stream::{self, BoxStream, StreamExt};

use super::Worker;
use crate::publish::waves::timed_out;
use crate::publish::{Answered, Event, Outcome};

impl Worker {
    /// Publishes `events` within `worker.publish_timeout`: the parts of the answer as the
    /// publisher hands them back (the router: each sink's events when that sink answers), each
    /// event answered once (a position out of range or answered before is dropped). When the
    /// publisher ends without answering some events, or the deadline passes first (what is still
    /// publishing is dropped), a last part answers the rest retryable ("publish timed out after
    /// …"). Parts may be empty; the stream ends after the last.
    pub(super) fn publish_within_deadline<'a>(
        &'a self,
        events: &'a [Event],
    ) -> BoxStream<'a, Answered> {
        let timeout = self.options.publish_timeout;
        let publishing = PublishUnderDeadline {
            parts: Some(self.publisher.publish_parts(events)),
            deadline: Box::pin(tokio::time::sleep(timeout)),
            answered: vec![false; events.len()],
        };
        stream::unfold(publishing, move |mut publishing| async move {
            publishing.parts.as_ref()?;
            let part = tokio::select! {
                part = next_part(&mut publishing.parts) => match part {
                    Some(part) => part,
                    None => {
                        publishing.parts = None;
                        unanswered(&publishing.answered, "the publisher gave no result for this event")
                    }
                },
                _ = &mut publishing.deadline => {
                    publishing.parts = None; // drops what is still publishing
                    unanswered(&publishing.answered, &timed_out(timeout))
                },
            };
            let part = publishing.first_answers(part);
            Some((part, publishing))
        })
        .fuse()
        .boxed()
    }
}

/// One publish under its deadline.
struct PublishUnderDeadline<'a> {
    /// The publisher's parts; `None` once it ended or the deadline passed.
    parts: Option<BoxStream<'a, Answered>>,
    /// `worker.publish_timeout` from the start of the publish.
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// Which positions of the batch have been answered.
    answered: Vec<bool>,
}

impl PublishUnderDeadline<'_> {
    /// `part` without the positions out of range or answered before; the rest are now answered.
    fn first_answers(&mut self, part: Answered) -> Answered {
        part.into_iter()
            .filter(|(position, _)| {
                self.answered
                    .get_mut(*position)
                    .is_some_and(|seen| !std::mem::replace(seen, true))
            })
            .collect()
    }
}

/// The next part of a publish, or `None` when the publisher is done.
async fn next_part(parts: &mut Option<BoxStream<'_, Answered>>) -> Option<Answered> {
    match parts {
        Some(parts) => parts.next().await,
        None => std::future::pending().await,
    }
}

/// A retryable outcome with `reason` for every position not answered yet.
fn unanswered(answered: &[bool], reason: &str) -> Answered {
    answered
        .iter()
        .enumerate()
        .filter(|(_, seen)| !**seen)
        .map(|(position, _)| (position, Outcome::retryable(reason)))
        .collect()
}
