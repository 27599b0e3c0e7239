//! One compilation of a plugin artifact at a time among the processes that share a cache.
//!
//! Hosts started together on one machine (a fleet's rollout, a restart of every host, tests side
//! by side) find the same artifact missing at the same moment. Without a lock each compiles it:
//! a large component costs seconds of both cores per process. With it, the first process
//! compiles and stores the artifact while the others wait, then load what it stored.
//!
//! The lock is an advisory file lock (`flock` on Unix, `LockFileEx` on Windows) on
//! `<key>.lock` beside the artifact. The operating system drops it when its holder exits or is
//! killed, so a crashed compiler never blocks the others. A holder that hangs (a stopped
//! process) holds them up for [`COMPILE_WAIT`] at most: after that a waiter compiles the
//! artifact itself, as it would without a lock. Storing stays atomic either way (rename into
//! place), so two compilations of one key are only wasted work, never a torn artifact.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a process waits for another one compiling the same artifact before it compiles the
/// artifact itself. Far above the slowest compile seen (a Python component: about 30 s in a
/// debug build on a busy 2-core machine, 3–5 s in a release build).
pub const COMPILE_WAIT: Duration = Duration::from_secs(120);

/// How often a waiting process tries the lock again.
const POLL: Duration = Duration::from_millis(25);

/// Held while this process compiles one artifact; released when dropped (or when the process
/// ends, however it ends).
#[derive(Debug)]
pub struct CompileLock {
    _file: File,
}

/// What [`CompileLock::acquire`] got.
#[derive(Debug)]
pub enum Acquired {
    /// The lock, at once: nobody else was compiling this artifact.
    Free(CompileLock),
    /// The lock, after another process released it: that process has probably stored the
    /// artifact, so look in the cache again before compiling.
    AfterWaiting(CompileLock),
    /// No lock within the wait (its holder hangs): compile without it.
    TimedOut,
}

impl CompileLock {
    /// Takes the lock file at `path` (created if missing), waiting up to `wait` for another
    /// holder to release it.
    pub fn acquire(path: &Path, wait: Duration) -> io::Result<Acquired> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        let started = Instant::now();
        let mut waited = false;
        loop {
            match file.try_lock() {
                Ok(()) if waited => return Ok(Acquired::AfterWaiting(CompileLock { _file: file })),
                Ok(()) => return Ok(Acquired::Free(CompileLock { _file: file })),
                Err(TryLockError::WouldBlock) if started.elapsed() >= wait => {
                    return Ok(Acquired::TimedOut);
                }
                Err(TryLockError::WouldBlock) => {
                    waited = true;
                    std::thread::sleep(POLL);
                }
                Err(TryLockError::Error(error)) => return Err(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_lock_is_taken_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        assert!(matches!(
            CompileLock::acquire(&path, Duration::from_secs(5)).unwrap(),
            Acquired::Free(_)
        ));
    }

    /// The lock at `path`, held through another open file description, which stands for another
    /// process: file locks conflict between them even within one process.
    fn held_elsewhere(path: &Path) -> File {
        let holder = File::create(path).unwrap();
        holder.lock().unwrap();
        holder
    }

    #[test]
    fn a_held_lock_is_waited_for_until_its_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let holder = held_elsewhere(&path);
        let waiter = std::thread::spawn({
            let path = path.clone();
            move || {
                let started = Instant::now();
                let acquired = CompileLock::acquire(&path, Duration::from_secs(10)).unwrap();
                (acquired, started.elapsed())
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
        let (acquired, waited) = waiter.join().unwrap();
        assert!(
            matches!(acquired, Acquired::AfterWaiting(_)),
            "{acquired:?}"
        );
        assert!(waited >= Duration::from_millis(250), "waited {waited:?}");
    }

    #[test]
    fn a_holder_that_never_lets_go_holds_up_a_waiter_for_the_wait_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let holder = held_elsewhere(&path);
        let started = Instant::now();
        let acquired = CompileLock::acquire(&path, Duration::from_millis(200)).unwrap();
        let waited = started.elapsed();
        assert!(matches!(acquired, Acquired::TimedOut), "{acquired:?}");
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
            "waited {waited:?}"
        );
        drop(holder);
    }
}
