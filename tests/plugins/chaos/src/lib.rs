//! The `chaos` test plugin: misbehaves on purpose, as its `init` config says, to prove the host
//! contains every misbehaviour.
//!
//! Settings (all optional; the default answers `ok` for every event):
//! - `behaviour`: `ok` | `retryable` | `permanent` | `loop` (never returns from `publish`) |
//!   `alloc` (allocates until memory runs out) | `too_few` (returns one result fewer);
//! - `rate_limited = MS`: every event is rate-limited with `retry-after-ms = MS`;
//! - `trap_on_type = T`: panics (a trap) when an event of type `T` is in the batch;
//! - `loop_on_type = T`: spins without host calls (until the deadline) when an event of type `T`
//!   is in the batch;
//! - `delay_ms = N`: every call sleeps N ms (a host call: the guest waits, it does not spin)
//!   before answering;
//! - `init_error = MESSAGE`: `init` fails with `chaos plugin: MESSAGE`;
//! - `quiet = true`: no logging line and no stdout line per call (for benchmarks);
//! - `flood = N`: every call writes one 1 MiB stdout line, then N logging lines, N stdout lines
//!   and N stderr lines (to prove the host caps a plugin's log output).
//!
//! Every `publish` call counts per instance; the count appears in `retryable`, `permanent` and
//! rate-limited messages (`call N`), in a logging line and on stdout, so tests can tell a reused
//! instance (count goes up) from a rebuilt one (count restarts at 1).

use outboxd_plugin::{Config, Event, Plugin, PublishError, RateLimit, export_plugin, log};

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
struct Chaos {
    behaviour: Behaviour,
    trap_on_type: Option<String>,
    loop_on_type: Option<String>,
    delay_ms: u64,
    quiet: bool,
    flood: u64,
    calls: u64,
}

impl Plugin for Chaos {
    const NAME: &'static str = "chaos";

    fn init(mut config: Config) -> Result<Self, String> {
        if let Some(message) = config.optional("init_error") {
            return Err(message);
        }
        let mut behaviour = match config.choice(
            "behaviour",
            &["ok", "retryable", "permanent", "loop", "alloc", "too_few"],
        )? {
            Some("retryable") => Behaviour::Retryable,
            Some("permanent") => Behaviour::Permanent,
            Some("loop") => Behaviour::Loop,
            Some("alloc") => Behaviour::Alloc,
            Some("too_few") => Behaviour::TooFew,
            _ => Behaviour::Ok,
        };
        if let Some(ms) = config.parse("rate_limited", "milliseconds")? {
            behaviour = Behaviour::RateLimited(ms);
        }
        let trap_on_type = config.optional("trap_on_type");
        let loop_on_type = config.optional("loop_on_type");
        let delay_ms = config.parse("delay_ms", "milliseconds")?.unwrap_or(0);
        let quiet = config.flag("quiet")?.unwrap_or(false);
        let flood = config.parse("flood", "a line count")?.unwrap_or(0);
        config.finish()?;
        Ok(Chaos {
            behaviour,
            trap_on_type,
            loop_on_type,
            delay_ms,
            quiet,
            flood,
            calls: 0,
        })
    }

    fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>> {
        self.calls += 1;
        let call = self.calls;
        if !self.quiet {
            log::info(&format!("chaos call {call} with {} events", batch.len()));
            println!("chaos stdout: call {call}");
        }
        if self.flood > 0 {
            println!("{}", "x".repeat(1 << 20));
        }
        for line in 0..self.flood {
            log::info(&format!("chaos flood log {line}"));
            println!("chaos flood stdout {line}");
            eprintln!("chaos flood stderr {line}");
        }
        if let Some(trap_type) = &self.trap_on_type
            && batch.iter().any(|event| &event.event_type == trap_type)
        {
            panic!("chaos: event type {trap_type} in the batch");
        }
        if self.delay_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(self.delay_ms));
        }
        if let Some(loop_type) = &self.loop_on_type
            && batch.iter().any(|event| &event.event_type == loop_type)
        {
            spin();
        }
        let result = |_: &Event| match &self.behaviour {
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
        match self.behaviour {
            Behaviour::Loop => spin(),
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

/// Computes forever without a host call.
fn spin() -> ! {
    let mut spins = 0u64;
    loop {
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
}

export_plugin!(Chaos);
