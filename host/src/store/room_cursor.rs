//! Where a per-room claim continues: the room cursor a store remembers between claims.
//!
//! With `worker.ordering = "per-room"` a claim may hand out only each room's head (its oldest
//! event still to deliver), so it reads room heads, not the backlog: one index seek per room with
//! pending events ([`crate::store::statement::claim`]). Claims take rooms in `room_id` order from
//! where the last claim stopped, and wrap around to the first room: every room with pending
//! events gets its turn within one round of claims, whatever the others' backlogs, and a claim
//! reads no further than the rooms it needs.
//!
//! - a claim reads the rooms after the cursor ([`RoomWalk::After`]), or from the first room when
//!   there is none ([`RoomWalk::Head`]);
//! - one that comes back short reads the rooms up to and including the cursor next
//!   ([`RoomWalk::UpTo`]), in the same transaction;
//! - the room of the last head it handed out becomes the cursor; a claim that hands out nothing
//!   forgets it.

use std::collections::HashMap;
use std::sync::Mutex;

/// Which rooms one read of a per-room claim covers, in `room_id` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomWalk {
    /// Every room.
    Head,
    /// The rooms after this one.
    After(String),
    /// The rooms up to and including this one.
    UpTo(String),
}

impl RoomWalk {
    /// The cursor room this walk is bounded by (`None` for [`RoomWalk::Head`]).
    pub fn cursor(&self) -> Option<&str> {
        match self {
            RoomWalk::Head => None,
            RoomWalk::After(room) | RoomWalk::UpTo(room) => Some(room),
        }
    }

    /// The read that follows this one when it handed out `got` of the `wanted` heads: the rooms
    /// up to the cursor after a short read of the rooms after it, else none.
    pub fn then(&self, got: usize, wanted: usize) -> Option<RoomWalk> {
        match self {
            RoomWalk::After(room) if got < wanted => Some(RoomWalk::UpTo(room.clone())),
            _ => None,
        }
    }
}

/// The room cursors of one store, per tenant (shared by the store's worker loops).
#[derive(Debug, Default)]
pub struct RoomCursors {
    by_app: Mutex<HashMap<String, String>>,
}

impl RoomCursors {
    /// Where the next per-room claim of `app_code` reads rooms.
    pub fn start(&self, app_code: &str) -> RoomWalk {
        let by_app = self.by_app.lock().unwrap_or_else(|e| e.into_inner());
        match by_app.get(app_code) {
            Some(room) => RoomWalk::After(room.clone()),
            None => RoomWalk::Head,
        }
    }

    /// Records the room of the last head a claim of `app_code` handed out (`None`: it handed out
    /// none, and the next claim starts from the first room).
    pub fn record(&self, app_code: &str, last_room: Option<String>) {
        let mut by_app = self.by_app.lock().unwrap_or_else(|e| e.into_inner());
        match last_room {
            Some(room) => {
                by_app.insert(app_code.to_string(), room);
            }
            None => {
                by_app.remove(app_code);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_go_round_the_rooms() {
        let cursors = RoomCursors::default();
        assert_eq!(cursors.start("a"), RoomWalk::Head);
        cursors.record("a", Some("r7".into()));
        assert_eq!(cursors.start("a"), RoomWalk::After("r7".into()));
        assert_eq!(cursors.start("b"), RoomWalk::Head);
        // A short read after the cursor goes on with the rooms up to it; a full one does not.
        let after = cursors.start("a");
        assert_eq!(after.then(3, 10), Some(RoomWalk::UpTo("r7".into())));
        assert_eq!(after.then(10, 10), None);
        assert_eq!(RoomWalk::UpTo("r7".into()).then(0, 10), None);
        assert_eq!(RoomWalk::Head.then(0, 10), None);
        // A claim that handed out nothing starts from the first room next time.
        cursors.record("a", None);
        assert_eq!(cursors.start("a"), RoomWalk::Head);
    }
}
