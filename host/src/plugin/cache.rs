//! On-disk cache of precompiled plugin artifacts, keyed by sha256(wasm bytes) and the engine's
//! compatibility hash.
//!
//! Loading a precompiled artifact is `unsafe` in wasmtime (it is native code), so the cache only
//! ever returns bytes this host wrote itself: the directory must carry the marker file this host
//! writes when it creates it, must be private to its owner (mode 0700 on Unix), and every
//! artifact must match the sha256 recorded next to it when it was stored. Processes sharing the
//! directory compile each artifact once: the others wait for it ([`super::compile_lock`]).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::compile_lock::{Acquired, COMPILE_WAIT, CompileLock};
use super::error::PluginError;

/// File whose presence says "this directory was created by outboxd's plugin cache".
const MARKER: &str = "OUTBOXD_PLUGIN_CACHE";

/// Where a compiled component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A trusted precompiled artifact was loaded: nothing was compiled.
    Hit,
    /// The component was compiled and its artifact stored for next time.
    Stored,
    /// The component was compiled; no cache is in use (or storing failed).
    Disabled,
}

/// A directory of `<key>.cwasm` artifacts with `<key>.sha256` checksums (and `<key>.lock`, the
/// lock of its compilation).
#[derive(Debug)]
pub struct ArtifactCache {
    dir: PathBuf,
}

impl ArtifactCache {
    /// Opens (creating if needed) the cache at `dir`, or at the default location when `None`.
    ///
    /// An explicitly configured directory that cannot be used is an error. For the default
    /// location, problems fall back to a private directory under the system temp dir, and if
    /// that cannot be trusted either, caching is off (`Ok(None)`) with a warning.
    pub fn open(dir: Option<&Path>) -> Result<Option<ArtifactCache>, PluginError> {
        if let Some(dir) = dir {
            return prepare(dir)
                .map(|()| {
                    Some(ArtifactCache {
                        dir: dir.to_path_buf(),
                    })
                })
                .map_err(|source| PluginError::Cache {
                    dir: dir.to_path_buf(),
                    source,
                });
        }
        for candidate in default_dirs() {
            match prepare(&candidate) {
                Ok(()) => return Ok(Some(ArtifactCache { dir: candidate })),
                Err(error) => {
                    tracing::warn!(dir = %candidate.display(), %error, "plugin cache directory unusable");
                }
            }
        }
        tracing::warn!("no usable plugin cache directory: plugins are compiled at every start");
        Ok(None)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact stored under `key`, if present and its checksum matches.
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let artifact = fs::read(self.artifact_path(key)).ok()?;
        let recorded = fs::read_to_string(self.checksum_path(key)).ok()?;
        if hex::encode(Sha256::digest(&artifact)) == recorded.trim() {
            Some(artifact)
        } else {
            tracing::warn!(dir = %self.dir.display(), key, "cached plugin artifact fails its checksum; recompiling");
            self.remove(key);
            None
        }
    }

    /// Stores `artifact` under `key` (written to temporary files, then renamed into place).
    pub fn store(&self, key: &str, artifact: &[u8]) -> io::Result<()> {
        let checksum = hex::encode(Sha256::digest(artifact));
        write_atomically(&self.artifact_path(key), artifact)?;
        write_atomically(&self.checksum_path(key), checksum.as_bytes())
    }

    /// Waits, up to [`COMPILE_WAIT`], until no other process sharing this cache compiles the
    /// artifact of `key`; the lock returned keeps the others waiting until it drops
    /// ([`compile_lock`](super::compile_lock)). `None` when the lock file cannot be used
    /// (logged); then, as after [`Acquired::TimedOut`] (logged too), compile without it.
    pub fn lock_for_compile(&self, key: &str) -> Option<Acquired> {
        let path = self.dir.join(format!("{key}.lock"));
        match CompileLock::acquire(&path, COMPILE_WAIT) {
            Ok(Acquired::TimedOut) => {
                tracing::warn!(dir = %self.dir.display(), key, waited = ?COMPILE_WAIT, "another process is still compiling this plugin; compiling it here too");
                Some(Acquired::TimedOut)
            }
            Ok(acquired) => Some(acquired),
            Err(error) => {
                tracing::warn!(lock = %path.display(), %error, "cannot lock the plugin artifact; compiling it without the lock");
                None
            }
        }
    }

    /// Deletes the artifact stored under `key` (best effort).
    pub fn remove(&self, key: &str) {
        let _ = fs::remove_file(self.checksum_path(key));
        let _ = fs::remove_file(self.artifact_path(key));
    }

    fn artifact_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cwasm"))
    }

    fn checksum_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.sha256"))
    }
}

/// Default locations, best first: `$XDG_CACHE_HOME/outboxd`, `~/.cache/outboxd`, then
/// `<temp>/outboxd-plugin-cache-<user>`.
fn default_dirs() -> Vec<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let mut dirs = Vec::new();
    if let Some(xdg) = non_empty("XDG_CACHE_HOME") {
        dirs.push(PathBuf::from(xdg).join("outboxd"));
    }
    if let Some(home) = non_empty("HOME") {
        dirs.push(PathBuf::from(home).join(".cache").join("outboxd"));
    }
    let user =
        non_empty("USER").map_or_else(|| "user".into(), |u| u.to_string_lossy().into_owned());
    dirs.push(std::env::temp_dir().join(format!("outboxd-plugin-cache-{user}")));
    dirs
}

/// Creates `dir` with its marker if it does not exist, adopts an existing empty one (writing the
/// marker, mode 0700), and checks any other existing one is ours.
///
/// The directory appears with its marker already inside (made under a temporary name, then
/// renamed into place), so hosts starting at the same moment never see it half made.
fn prepare(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut staging = dir.as_os_str().to_owned();
        staging.push(format!(
            ".tmp-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let staging = PathBuf::from(staging);
        create_private_dir(&staging)?;
        fs::write(
            staging.join(MARKER),
            b"outboxd precompiled plugin artifacts; safe to delete\n",
        )?;
        if let Err(error) = fs::rename(&staging, dir) {
            let _ = fs::remove_dir_all(&staging);
            if !dir.exists() {
                return Err(error);
            } // else another host made it first: check theirs below
        }
    }
    if !dir.join(MARKER).is_file() && is_empty_dir(dir)? {
        // An empty directory made for us (systemd's `CacheDirectory=`, `install -d`): adopt it.
        // The marker is written by this host; `check_private` below then requires the directory
        // to belong to the marker's owner.
        fs::write(
            dir.join(MARKER),
            b"outboxd precompiled plugin artifacts; safe to delete\n",
        )?;
        make_private(dir)?;
    }
    if !dir.join(MARKER).is_file() {
        return Err(io::Error::other(format!(
            "exists but was not created by outboxd (no {MARKER} file); refusing to load native code from it"
        )));
    }
    check_private(dir)
}

/// Whether `dir` has no entries at all.
fn is_empty_dir(dir: &Path) -> io::Result<bool> {
    Ok(fs::read_dir(dir)?.next().is_none())
}

/// Restricts `dir` to its owner (mode 0700 on Unix).
#[cfg(unix)]
fn make_private(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn make_private(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

/// On Unix, the directory must be accessible to its owner only, and that owner must be the
/// owner of the marker file (written by this host).
#[cfg(unix)]
fn check_private(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir)?;
    let marker = fs::metadata(dir.join(MARKER))?;
    if meta.mode() & 0o077 != 0 || meta.uid() != marker.uid() {
        return Err(io::Error::other(
            "is accessible to other users; refusing to load native code from it (chmod 700 or delete it)",
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// Writes `bytes` to a unique temporary file beside `path`, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{unique}", std::process::id()));
    let result = fs::File::create(&tmp)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
