//! Lines into outboxd's log (the `logging` import), tagged there with the sink's name.
//!
//! Outside a component (native unit tests) the lines go to stderr, so plugin logic that logs can
//! be tested with `cargo test`.

pub use crate::bindings::outbox::publisher::logging::Level;

/// Writes `message` at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_family = "wasm")]
    crate::bindings::outbox::publisher::logging::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    eprintln!("{level:?} {message}");
}

/// Writes `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Writes `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Writes `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Writes `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}
