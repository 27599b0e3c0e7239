//! What a command-line program on this library does first and last, the same way in `outboxd`
//! and `outboxd-bench`: load the config and start logging; at the end, stop the runtime within a
//! bound ([`shut_down`]).

use std::path::Path;
use std::time::Duration;

use crate::config::{Config, LogFormat};
use crate::store::Backend;

/// Loads `config` (or `./outboxd.toml` when present, else the defaults), with the `OUTBOXD_*`
/// environment and `database_url` (a `--database-url` flag) over it. A `database_url` no backend
/// takes is refused first, naming the URL's scheme.
pub fn load_config(config: Option<&Path>, database_url: Option<&str>) -> anyhow::Result<Config> {
    let default_path = Path::new("outboxd.toml");
    let path = match config {
        Some(path) => Some(path),
        None if default_path.exists() => Some(default_path),
        None => None,
    };
    if let Some(url) = database_url {
        Backend::from_url(url)?;
    }
    Ok(Config::load_with_database_url(
        path,
        std::env::vars(),
        database_url,
    )?)
}

/// Logs to stderr in the configured format with `filter` (normally the configured level);
/// `RUST_LOG` overrides it. PostgreSQL's notices (sqlx logs them at INFO: "trigger … does not
/// exist, skipping" from the migrations' `DROP TRIGGER IF EXISTS`) show only as warnings.
/// A second call changes nothing.
pub fn init_logging(config: &Config, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{filter},sqlx::postgres::notice=warn"))
    });
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match config.log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// How long a program waits at its end for the runtime's tasks and threads to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Stops `runtime` once the command has returned (its batches marked, its pools closed), waiting
/// at most [`SHUTDOWN_GRACE`]: a library's background task that never yields (sqlx 0.9.0's pool
/// reaper could spin on a miscounted idle queue) would otherwise keep the process from exiting,
/// as dropping a runtime waits for every worker thread.
pub fn shut_down(runtime: tokio::runtime::Runtime) {
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use super::{SHUTDOWN_GRACE, shut_down};

    /// A task that spins without ever yielding holds its worker thread: dropping the runtime
    /// would wait for it for good; `shut_down` gives up after the grace.
    #[test]
    fn a_task_that_never_yields_does_not_hold_the_shutdown() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (spinning, started) = std::sync::mpsc::channel();
        runtime.spawn({
            let stop = stop.clone();
            async move {
                let _ = spinning.send(());
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        });
        started
            .recv_timeout(Duration::from_secs(10))
            .expect("the task spins");
        let (done, finished) = std::sync::mpsc::channel();
        let began = Instant::now();
        std::thread::spawn(move || {
            shut_down(runtime);
            let _ = done.send(began.elapsed());
        });
        let took = finished.recv_timeout(SHUTDOWN_GRACE * 4);
        stop.store(true, Ordering::Relaxed); // the spinning thread ends either way
        let took = took.expect("shut_down returned while a task spun");
        assert!(
            took >= SHUTDOWN_GRACE / 2,
            "it waited for the grace: {took:?}"
        );
    }
}
