//! The shared wasmtime `Engine` (component model, async, epoch interruption), its epoch ticker,
//! and compiling plugin files into components through the artifact cache.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use super::cache::{ArtifactCache, CacheOutcome};
use super::compile_lock::Acquired;
use super::error::{PluginError, boxed};
use super::runtime::PluginRuntime;
use crate::config::PluginSettings;

/// How often the epoch advances. Deadlines are checked (and a running guest yields to tokio) at
/// this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The one wasmtime engine of the process with its epoch ticker and artifact cache. Cheap to
/// clone; the ticker thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct PluginEngine {
    inner: Arc<Inner>,
}

/// Shared state of [`PluginEngine`].
struct Inner {
    engine: Engine,
    cache: Option<ArtifactCache>,
    runtime: PluginRuntime,
    _ticker: EpochTicker,
}

/// A plugin file compiled (or loaded from the cache) into a component.
#[derive(Clone)]
pub struct CompiledPlugin {
    /// The component, ready to link.
    pub component: Component,
    /// Hex sha256 of the `.wasm` file.
    pub sha256: String,
    /// Size of the `.wasm` file in bytes.
    pub size: u64,
    /// Whether the precompiled artifact came from the cache.
    pub cache: CacheOutcome,
}

impl PluginEngine {
    /// Creates the engine, opens the artifact cache (`settings.cache_dir`, else the default
    /// location) and starts the epoch ticker and the plugin runtime's threads.
    pub fn new(settings: &PluginSettings) -> Result<PluginEngine, PluginError> {
        let mut config = Config::new();
        // Plugins are linear-memory components: no GC proposals, hence no GC collector needed.
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .gc_support(false);
        let engine = Engine::new(&config).map_err(|e| PluginError::Engine { source: boxed(e) })?;
        let cache = ArtifactCache::open(settings.cache_dir.as_deref())?;
        let runtime = PluginRuntime::start().map_err(|e| PluginError::Engine {
            source: Box::new(e),
        })?;
        let ticker = EpochTicker::start(engine.clone());
        Ok(PluginEngine {
            inner: Arc::new(Inner {
                engine,
                cache,
                runtime,
                _ticker: ticker,
            }),
        })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The runtime every guest call runs on, apart from the host's own tasks.
    pub fn runtime(&self) -> &PluginRuntime {
        &self.inner.runtime
    }

    /// The artifact cache directory, if caching is enabled.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.cache.as_ref().map(ArtifactCache::dir)
    }

    /// Reads `path`, checks it is a component, and compiles it once: from the cache when a
    /// trusted artifact for these bytes and this engine exists, else compiling (off the async
    /// runtime) and storing the artifact.
    pub async fn compile(&self, path: &Path) -> Result<CompiledPlugin, PluginError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| PluginError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        check_component_header(path, &bytes)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let size = bytes.len() as u64;
        let key = format!("{sha256}-{:016x}", self.compatibility_hash());
        let this = self.clone();
        let owned_path = path.to_path_buf();
        tokio::task::spawn_blocking(move || this.compile_blocking(&owned_path, &bytes, &key))
            .await
            .map_err(|join| PluginError::Compile {
                path: path.to_path_buf(),
                source: Box::new(join),
            })?
            .map(|(component, cache)| CompiledPlugin {
                component,
                sha256,
                size,
                cache,
            })
    }

    /// The cache lookup and, on a miss, the compilation; blocking.
    fn compile_blocking(
        &self,
        path: &Path,
        bytes: &[u8],
        key: &str,
    ) -> Result<(Component, CacheOutcome), PluginError> {
        let Some(cache) = &self.inner.cache else {
            let (component, _) = self.compile_now(path, bytes)?;
            return Ok((component, CacheOutcome::Disabled));
        };
        if let Some(component) = self.cached(cache, path, key) {
            return Ok((component, CacheOutcome::Hit));
        }
        // Another process sharing the cache may be compiling this very artifact (hosts started
        // together): wait for it and load what it stored instead of compiling it twice.
        let _lock = match cache.lock_for_compile(key) {
            Some(Acquired::AfterWaiting(lock)) => {
                if let Some(component) = self.cached(cache, path, key) {
                    return Ok((component, CacheOutcome::Hit));
                }
                Some(lock)
            }
            Some(Acquired::Free(lock)) => Some(lock),
            Some(Acquired::TimedOut) | None => None,
        };
        let (component, artifact) = self.compile_now(path, bytes)?;
        let outcome = match cache.store(key, &artifact) {
            Ok(()) => CacheOutcome::Stored,
            Err(error) => {
                tracing::warn!(dir = %cache.dir().display(), error = %error, "cannot store precompiled plugin artifact");
                CacheOutcome::Disabled
            }
        };
        Ok((component, outcome))
    }

    /// The component of the trusted artifact stored under `key`, if any; an artifact this engine
    /// cannot load is removed.
    fn cached(&self, cache: &ArtifactCache, path: &Path, key: &str) -> Option<Component> {
        let artifact = cache.load(key)?;
        // SAFETY: `ArtifactCache::load` only returns bytes this host wrote with
        // `Engine::precompile_component` into a private directory it created, whose
        // checksum it verified; the key pins the engine's compatibility hash.
        match unsafe { Component::deserialize(&self.inner.engine, &artifact) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(plugin = %path.display(), error = %error, "discarding unusable cached plugin artifact");
                cache.remove(key);
                None
            }
        }
    }

    /// Compiles `bytes`: the component, and its artifact to store.
    fn compile_now(&self, path: &Path, bytes: &[u8]) -> Result<(Component, Vec<u8>), PluginError> {
        let engine = &self.inner.engine;
        let artifact = engine
            .precompile_component(bytes)
            .map_err(|e| PluginError::Compile {
                path: path.to_path_buf(),
                source: boxed(e),
            })?;
        // SAFETY: `artifact` was produced just now by this engine's `precompile_component`.
        let component = unsafe { Component::deserialize(engine, &artifact) }.map_err(|e| {
            PluginError::Compile {
                path: path.to_path_buf(),
                source: boxed(e),
            }
        })?;
        Ok((component, artifact))
    }

    /// A stable digest of everything that makes a precompiled artifact usable by this engine.
    fn compatibility_hash(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.inner
            .engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        hasher.finish()
    }
}

/// Rejects anything but a component (binary layer 1) with a message saying what it is instead.
fn check_component_header(path: &Path, bytes: &[u8]) -> Result<(), PluginError> {
    let not = |reason: &str| {
        Err(PluginError::NotAComponent {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        })
    };
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        if bytes.starts_with(b"\x7fELF") {
            return not("it is a precompiled artifact; give outboxd the `.wasm` component itself");
        }
        return not("it is not a WebAssembly binary (no `\\0asm` header)");
    }
    match bytes[4..8] {
        [_, _, 1, 0] => Ok(()),
        [1, 0, 0, 0] => not(
            "it is a core WebAssembly module; build the plugin for wasm32-wasip2 \
             (or wrap it with `wasm-tools component new`)",
        ),
        _ => not("unknown WebAssembly binary version"),
    }
}

/// A thread advancing the engine's epoch every [`EPOCH_TICK`], independent of the async
/// runtime so a guest spinning on a runtime thread is still interrupted.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine) -> EpochTicker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("outboxd-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!(
                "cannot start the epoch ticker thread: plugin deadlines rely on the outer timeout only"
            );
        }
        EpochTicker { stop, thread }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
