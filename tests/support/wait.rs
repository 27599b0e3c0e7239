//! The one way a test waits for something to happen: poll a condition every [`POLL_EVERY`] until
//! it holds, and fail naming what was awaited and what was last seen when the time is up.
//!
//! ```ignore
//! // A condition with something to show when it fails: `Ok(value)` ends the wait (and is
//! // returned), `Err(observed)` means "not yet" and is printed if the time runs out.
//! let row = support::wait_until("the row delivered", DEADLINE, || async {
//!     let row = db.row("app", "e1").await.unwrap();
//!     if row.status == "delivered" { Ok(row) } else { Err(row.status) }
//! })
//! .await;
//!
//! // A plain yes / no condition.
//! support::wait_for("the feed connected", DEADLINE, || async { wake.has_commit_feed() }).await;
//! ```
//!
//! A fixed sleep is never a wait: a sleep that stays in a test is part of what it tests (a quiet
//! spell in which nothing may happen, a producer's pace, a sink's configured delay) and says so.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

/// How often a condition is polled.
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// Polls `probe` every [`POLL_EVERY`] until it returns `Ok(value)`, and returns that value; after
/// `timeout` panics with `what`, the time waited and the last `Err(observed)`.
pub async fn wait_until<T, O, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    O: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, O>>,
{
    wait_until_every(what, timeout, POLL_EVERY, probe).await
}

/// [`wait_until`] polling every `every`: for a test that times what it waits for, finer than
/// [`POLL_EVERY`].
pub async fn wait_until_every<T, O, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut probe: F,
) -> T
where
    O: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, O>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(observed) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!("{what}: not within {timeout:?}; last seen: {observed:?}");
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `condition` every [`POLL_EVERY`] until it is true; after `timeout` panics with `what`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until(what, timeout, || {
        let check = condition();
        async move { if check.await { Ok(()) } else { Err(false) } }
    })
    .await
}

/// [`wait_until`] for a test without a runtime (a thread driving a child process): `probe` is
/// plain code, the pause a thread sleep.
pub fn wait_until_blocking<T, O, F>(what: &str, timeout: Duration, mut probe: F) -> T
where
    O: Debug,
    F: FnMut() -> Result<T, O>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(observed) => {
                if std::time::Instant::now() >= deadline {
                    panic!("{what}: not within {timeout:?}; last seen: {observed:?}");
                }
            }
        }
        std::thread::sleep(POLL_EVERY);
    }
}
