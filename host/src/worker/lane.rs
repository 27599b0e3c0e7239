//! `Lane`: what one worker loop keeps for its life (its worker id, how far its claims may run
//! ahead of its deliveries, and the publishing turn of its batches), shared by the loop's steps
//! (`slot.rs`) and its batches in flight (`deliveries.rs`).

use tokio::sync::Semaphore;

use super::Worker;
use super::ahead::ClaimAhead;
use crate::config::DEADLINE_MARGIN;

/// What a loop keeps for its whole life and its deliveries borrow: its worker id, how far it
/// claims ahead, and the turn its batches take to publish.
pub(super) struct Lane {
    /// `<node_id>/<slot>`.
    pub(super) worker_id: String,
    /// Deliveries a claim may overlap: two where writers run side by side while deliveries are
    /// quick, one behind a slow one, none on SQLite (`ahead.rs`).
    pub(super) ahead: ClaimAhead,
    /// A batch read ahead publishes only once the one before it is published: per loop one
    /// batch publishes at a time, so a host killed at any moment has at most one batch per loop
    /// published and not yet marked (the next owner of its partition reads it again, no attempt
    /// spent). FIFO, so batches publish in read order.
    pub(super) publishing: Semaphore,
}

impl Lane {
    /// The lane of loop `slot` of `worker`.
    pub(super) fn new(worker: &Worker, slot: u32) -> Lane {
        let options = &*worker.options;
        Lane {
            worker_id: format!("{}/{}", options.node_id, slot),
            ahead: ClaimAhead::new(
                worker.store.backend().concurrent_writers(),
                options
                    .lease
                    .saturating_sub(options.publish_timeout + DEADLINE_MARGIN),
            ),
            publishing: Semaphore::new(1),
        }
    }
}
