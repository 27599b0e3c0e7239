//! The plugin runtime: the tokio runtime on threads of its own that every guest call runs on.
//!
//! A guest that computes without host calls keeps the thread it runs on busy until the next
//! epoch tick makes it yield, and until its deadline if it never returns. On the host's main
//! runtime that thread is one of the few that also run the claim loops, the marks, the admin
//! listener and the signal handler, and a task woken on it (a mark's database reply) can sit in
//! its queue behind the guest. Guest calls therefore run here, on one thread per core (at least
//! [`MIN_PLUGIN_THREADS`]) named `outboxd-plugin`, and the main runtime only awaits their results: a spinning guest costs
//! the other sinks a share of the CPU (the operating system's scheduler and the epoch yields
//! divide it), never a place in the main runtime's queues.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::{Builder, Runtime};
use tokio::task::JoinHandle;

/// The fewest worker threads of the plugin runtime; it has one per core beyond that. Each guest
/// call yields to the runtime at every epoch tick, so calls of several sinks share these threads
/// fairly; more threads than cores would only add switching.
pub const MIN_PLUGIN_THREADS: usize = 2;

/// The plugin runtime, shared by the clones of one `PluginEngine`. Cheap to clone; stopped
/// (without waiting for running guest calls, which are abandoned) when the last clone is dropped.
#[derive(Clone)]
pub struct PluginRuntime {
    inner: Arc<Owned>,
}

/// Owns the runtime so that dropping it never blocks (a runtime dropped inside another one's
/// task would panic).
struct Owned(Option<Runtime>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl PluginRuntime {
    /// Starts the runtime's threads.
    pub fn start() -> std::io::Result<PluginRuntime> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(
                std::thread::available_parallelism().map_or(MIN_PLUGIN_THREADS, |cores| {
                    cores.get().max(MIN_PLUGIN_THREADS)
                }),
            )
            .thread_name("outboxd-plugin")
            .enable_all()
            .build()?;
        Ok(PluginRuntime {
            inner: Arc::new(Owned(Some(runtime))),
        })
    }

    /// Runs `future` on the plugin runtime; its result comes back through the handle.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.inner.0 {
            Some(runtime) => runtime.spawn(future),
            // Only `Drop` takes the runtime out, and a live clone keeps it from running.
            None => unreachable!("plugin runtime used after it was stopped"),
        }
    }
}
