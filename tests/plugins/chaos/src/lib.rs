//! The `chaos` test plugin: misbehaves on purpose, as its `init` config says, to prove the host
//! contains every misbehaviour.
//!
//! Settings (all optional; the default answers `ok` for every event):
//! - `behaviour`: `ok` | `retryable` | `permanent` | `loop` (never returns from `publish`) |
//!   `alloc` (allocates until memory runs out) | `too_few` (returns one result fewer);
//! - `rate_limited = MS`: every event is rate-limited with `retry-after-ms = MS`;
//! - `trap_on_type = T`: panics (a trap) when an event of type `T` is in the batch;
//! - `init_error = MESSAGE`: `init` fails with `MESSAGE`;
//! - `quiet = true`: no logging line and no stdout line per call (for benchmarks);
//! - `flood = N`: every call writes one 1 MiB stdout line, then N logging lines, N stdout lines
//!   and N stderr lines (to prove the host caps a plugin's log output).
//!
//! Every `publish` call counts per instance; the count appears in `retryable`, `permanent` and
//! rate-limited messages (`call N`), in a logging line and on stdout, so tests can tell a reused
//! instance (count goes up) from a rebuilt one (count restarts at 1).

wit_bindgen::generate!({
    world: "publisher",
    path: "../../../wit",
});

use std::sync::Mutex;

use outbox::publisher::logging::{Level, log};
use outbox::publisher::types::RateLimit;

/// What `publish` does.
#[derive(Clone, PartialEq)]
enum Behaviour {
    Ok,
    Retryable,
    Permanent,
    Loop,
    Alloc,
    TooFew,
    RateLimited(u64),
}

/// This instance's settings and publish-call count.
struct State {
    behaviour: Behaviour,
    trap_on_type: Option<String>,
    quiet: bool,
    flood: u64,
    calls: u64,
}

/// Set by `init`.
static STATE: Mutex<Option<State>> = Mutex::new(None);

/// The plugin's implementation of the `publisher` world.
struct Chaos;

impl Guest for Chaos {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let mut state = State {
            behaviour: Behaviour::Ok,
            trap_on_type: None,
            quiet: false,
            flood: 0,
            calls: 0,
        };
        for (key, value) in config {
            state.behaviour =
                match (key.as_str(), value.as_str()) {
                    ("behaviour", "ok") => Behaviour::Ok,
                    ("behaviour", "retryable") => Behaviour::Retryable,
                    ("behaviour", "permanent") => Behaviour::Permanent,
                    ("behaviour", "loop") => Behaviour::Loop,
                    ("behaviour", "alloc") => Behaviour::Alloc,
                    ("behaviour", "too_few") => Behaviour::TooFew,
                    ("rate_limited", ms) => Behaviour::RateLimited(ms.parse().map_err(|_| {
                        format!("chaos: rate_limited wants milliseconds, got `{ms}`")
                    })?),
                    ("trap_on_type", event_type) => {
                        state.trap_on_type = Some(event_type.to_string());
                        continue;
                    }
                    ("quiet", flag) => {
                        state.quiet = flag == "true";
                        continue;
                    }
                    ("flood", lines) => {
                        state.flood = lines.parse().map_err(|_| {
                            format!("chaos: flood wants a line count, got `{lines}`")
                        })?;
                        continue;
                    }
                    ("init_error", message) => return Err(message.to_string()),
                    (key, value) => return Err(format!("chaos: unknown setting {key} = {value}")),
                };
        }
        *STATE.lock().unwrap() = Some(state);
        Ok(())
    }

    fn publish(batch: Vec<Event>) -> Vec<Result<(), PublishError>> {
        let mut guard = STATE.lock().unwrap();
        let state = guard.as_mut().expect("chaos: publish before init");
        state.calls += 1;
        let call = state.calls;
        if !state.quiet {
            log(
                Level::Info,
                &format!("chaos call {call} with {} events", batch.len()),
            );
            println!("chaos stdout: call {call}");
        }
        if state.flood > 0 {
            println!("{}", "x".repeat(1 << 20));
        }
        for line in 0..state.flood {
            log(Level::Info, &format!("chaos flood log {line}"));
            println!("chaos flood stdout {line}");
            eprintln!("chaos flood stderr {line}");
        }
        if let Some(trap_type) = &state.trap_on_type
            && batch.iter().any(|event| &event.event_type == trap_type)
        {
            panic!("chaos: event type {trap_type} in the batch");
        }
        let result = |_: &Event| match &state.behaviour {
            Behaviour::Retryable => Err(PublishError::Retryable(format!(
                "chaos retryable, call {call}"
            ))),
            Behaviour::Permanent => Err(PublishError::Permanent(format!(
                "chaos permanent, call {call}"
            ))),
            Behaviour::RateLimited(ms) => Err(PublishError::RateLimited(RateLimit {
                message: format!("chaos rate limited, call {call}"),
                retry_after_ms: *ms,
            })),
            _ => Ok(()),
        };
        match state.behaviour {
            Behaviour::Loop => {
                let mut spins = 0u64;
                loop {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            }
            Behaviour::Alloc => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            Behaviour::TooFew => batch.iter().skip(1).map(result).collect(),
            _ => batch.iter().map(result).collect(),
        }
    }
}

export!(Chaos);
