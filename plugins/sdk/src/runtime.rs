//! The glue [`export_plugin!`](crate::export_plugin) expands to: one plugin value per instance,
//! made by `init`, used by `publish`, "publish before init" answered for every event.

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::{Config, Event, Plugin, PublishError};

/// Where an instance keeps its plugin value (a component instance is single-threaded).
pub type Slot<P> = LocalKey<RefCell<Option<P>>>;

/// `init`: builds `P` from the settings and keeps it; an error is prefixed with `P::NAME plugin: `.
pub fn init<P: Plugin>(slot: &'static Slot<P>, pairs: Vec<(String, String)>) -> Result<(), String> {
    let plugin = P::init(Config::new(pairs)).map_err(|message| prefixed::<P>(&message))?;
    slot.with(|cell| *cell.borrow_mut() = Some(plugin));
    Ok(())
}

/// `publish`: hands the batch to the plugin; before `init` every event is retryable.
pub fn publish<P: Plugin>(
    slot: &'static Slot<P>,
    batch: &[Event],
) -> Vec<Result<(), PublishError>> {
    slot.with(|cell| match cell.borrow_mut().as_mut() {
        Some(plugin) => plugin.publish(batch),
        None => batch
            .iter()
            .map(|_| {
                Err(PublishError::Retryable(prefixed::<P>(
                    "publish before init",
                )))
            })
            .collect(),
    })
}

/// `message` with the plugin's name in front, unless it already starts with it.
fn prefixed<P: Plugin>(message: &str) -> String {
    let prefix = format!("{} plugin: ", P::NAME);
    if message.starts_with(&prefix) {
        message.to_string()
    } else {
        format!("{prefix}{message}")
    }
}
