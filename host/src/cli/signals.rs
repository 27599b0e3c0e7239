//! Signals of `outboxd run`: the first SIGINT/SIGTERM asks for a graceful stop; a repeat within
//! [`SIGNAL_REPEAT_WINDOW`] is the same request (GNU `timeout` and some process managers signal
//! the process and then its group); a later one, or SIGQUIT, exits at once.

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A SIGINT/SIGTERM this soon after the first one is the same request (GNU `timeout` and some
/// process managers signal the process and then its group), not a demand to exit at once.
pub const SIGNAL_REPEAT_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// Exit status after a second SIGINT/SIGTERM (later than [`SIGNAL_REPEAT_WINDOW`]).
pub const EXIT_SECOND_SIGNAL: i32 = 130;

/// Exit status after SIGQUIT.
pub const EXIT_SIGQUIT: i32 = 131;

/// Cancels `shutdown` on the first SIGINT or SIGTERM. Another SIGINT/SIGTERM within
/// [`SIGNAL_REPEAT_WINDOW`] is ignored; a later one exits at once ([`EXIT_SECOND_SIGNAL`]), as does
/// SIGQUIT at any time ([`EXIT_SIGQUIT`]). Rows left `delivering` by a fast exit are reclaimed
/// after their lease.
pub async fn stop_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
    ) else {
        warn!("cannot install signal handlers; stop outboxd with SIGKILL");
        return;
    };
    let quit_now = || -> ! {
        warn!("SIGQUIT: exiting at once; rows in flight are reclaimed after their lease");
        std::process::exit(EXIT_SIGQUIT)
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = quit.recv() => quit_now(),
    }
    let first = std::time::Instant::now();
    info!(
        "shutdown requested: finishing batches in flight (SIGINT/SIGTERM again after {} or SIGQUIT to exit at once)",
        humantime::format_duration(SIGNAL_REPEAT_WINDOW)
    );
    shutdown.cancel();
    loop {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = quit.recv() => quit_now(),
        }
        if first.elapsed() < SIGNAL_REPEAT_WINDOW {
            info!(
                "repeated signal within {} of the first: same shutdown request",
                humantime::format_duration(SIGNAL_REPEAT_WINDOW)
            );
            continue;
        }
        warn!("second signal: exiting at once; rows in flight are reclaimed after their lease");
        std::process::exit(EXIT_SECOND_SIGNAL);
    }
}
