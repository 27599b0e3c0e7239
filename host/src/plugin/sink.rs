//! `PluginSink`: one `[[sink]]` running its plugin under its limits (outbound HTTP included),
//! with a small pool of reusable instances; implements [`Publisher`]. What the plugin says
//! (results, `init` errors, traps) has the sink's secret config values redacted.
//!
//! A batch is published as calls of at most `limits.max_batch_size` events and
//! `limits.max_batch_bytes` bytes; an event larger than `limits.max_event_size` fails alone,
//! permanently, without a call. A call that fails as a whole is bisected to find its culprit
//! (`isolate`). Every guest call runs on the plugin runtime (`runtime`), never on the thread
//! of the caller.
//!
//! Its parts: `sink/calls.rs` (a claimed batch as calls by count and bytes, each plugin result
//! as an outcome) and `sink/pool.rs` (instances created, pooled, and called under the deadline).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::task::AbortOnDropHandle;
use wasmtime::component::Component;

use super::bindings::PublisherComponentPre;
use super::engine::{CompiledPlugin, PluginEngine};
use super::error::PluginError;
use super::http::HttpPolicy;
use super::isolate::Suspects;
use super::log_limit::LogLimit;
use super::redact::Redactor;
use super::state::{HostState, SinkShared};
use super::world::{self, WorldInfo};
use crate::broker::Brokers;
use crate::config::SinkSpec;
use crate::metrics::Metrics;
use crate::publish::{Event, Outcome, Publisher};
use pool::Instance;

mod calls;
mod pool;

/// Slack given to a call beyond its epoch deadline before the outer tokio timeout drops it
/// (covers a guest blocked in a host call, where epochs are not checked).
const OUTER_TIMEOUT_GRACE: Duration = Duration::from_secs(1);

/// Most idle instances a sink keeps for reuse; concurrent publishes beyond this create extra
/// instances that are dropped after use.
pub const MAX_IDLE_INSTANCES: usize = 4;

/// How long a sink may spend on one claimed batch when its caller says nothing else
/// ([`PluginSink::with_batch_budget`]): the default `worker.publish_timeout` (20s) less the
/// deadline margin (1s).
pub const DEFAULT_BATCH_BUDGET: Duration = Duration::from_secs(19);

/// A running sink: its plugin linked once (`InstancePre`), instances reused across batches. Cheap
/// to clone (the clones share the instances).
#[derive(Clone)]
pub struct PluginSink {
    core: Arc<SinkCore>,
}

/// Everything of a sink; shared with the guest calls running on the plugin runtime.
struct SinkCore {
    name: Arc<str>,
    shared: Arc<SinkShared>,
    engine: PluginEngine,
    pre: PublisherComponentPre<HostState>,
    config: Vec<(String, String)>,
    publish_timeout: Duration,
    memory_cap: u64,
    max_batch_size: usize,
    max_batch_bytes: u64,
    max_event_size: u64,
    max_retry_after: Duration,
    /// How long one `publish` (one claimed batch) may take, bisection included.
    batch_budget: Duration,
    suspects: Suspects,
    idle: Mutex<Vec<Instance>>,
    instances_built: AtomicU64,
    plugin: CompiledPlugin,
    world: WorldInfo,
    metrics: Metrics,
}

/// Counters of a sink's instance pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkStats {
    /// Instances created (instantiated and `init`ed) since the sink started, including rebuilds.
    pub instances_built: u64,
    /// Instances idle in the pool right now.
    pub idle_instances: usize,
}

impl PluginSink {
    /// Compiles (or loads from the cache) the sink's plugin, checks its world and version, links
    /// it, and creates a first instance, calling `init` with the sink's config. An `init` error
    /// is [`PluginError::Init`] with the plugin's message. wasi:http is linked only when
    /// `limits.allow_hosts` is not empty; a plugin importing it otherwise is
    /// [`PluginError::HttpNotAllowed`].
    pub async fn start(engine: &PluginEngine, sink: &SinkSpec) -> Result<PluginSink, PluginError> {
        PluginSink::start_with_brokers(engine, sink, &Brokers::none()).await
    }

    /// [`PluginSink::start`] with the process's broker connections: the plugin may publish on
    /// those the sink's `limits.allow_brokers` names; a plugin importing the `broker` interface
    /// on a sink that names none is [`PluginError::BrokerNotAllowed`].
    pub async fn start_with_brokers(
        engine: &PluginEngine,
        sink: &SinkSpec,
        brokers: &Brokers,
    ) -> Result<PluginSink, PluginError> {
        let limits = sink.limits();
        let name: Arc<str> = Arc::from(sink.name());
        let http = HttpPolicy::new(name.clone(), sink);
        let plugin = engine.compile(sink.plugin()).await?;
        let world = world::inspect(engine.engine(), sink.plugin(), &plugin.component)?;
        if world.imports_http() && !http.allows_any() {
            return Err(PluginError::HttpNotAllowed {
                sink: sink.name().to_string(),
                path: sink.plugin().to_path_buf(),
            });
        }
        let brokers = brokers.only(&limits.allow_brokers);
        if world.imports_broker() && brokers.is_empty() {
            return Err(PluginError::BrokerNotAllowed {
                sink: sink.name().to_string(),
                path: sink.plugin().to_path_buf(),
            });
        }
        let pre = world::link(
            engine.engine(),
            sink.plugin(),
            &plugin.component,
            http.allows_any(),
        )?;
        let shared = Arc::new(SinkShared {
            name: name.clone(),
            redactor: Redactor::new(sink.config()),
            http: Arc::new(http),
            log_limit: LogLimit::new(
                name.clone(),
                limits.log_lines_per_second,
                usize::try_from(limits.log_line_max.0).unwrap_or(usize::MAX),
            ),
            brokers,
        });
        let core = SinkCore {
            name,
            shared,
            engine: engine.clone(),
            pre,
            config: sink
                .config()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            publish_timeout: limits.publish_timeout,
            memory_cap: limits.memory.0,
            max_batch_size: limits.max_batch_size as usize,
            max_batch_bytes: limits.batch_bytes(),
            max_event_size: limits.event_size_limit(),
            max_retry_after: limits.max_retry_after,
            batch_budget: DEFAULT_BATCH_BUDGET,
            suspects: Suspects::default(),
            idle: Mutex::new(Vec::new()),
            instances_built: AtomicU64::new(0),
            plugin,
            world,
            metrics: Metrics::default(),
        };
        let core = Arc::new(core);
        let first = core.clone();
        let first = engine
            .runtime()
            .spawn(async move { first.instantiate().await })
            .await
            .map_err(|join| PluginError::Instantiate {
                sink: sink.name().to_string(),
                source: Box::new(join),
            })??;
        core.check_in(first);
        Ok(PluginSink { core })
    }

    /// The same sink counting its traps, deadline overruns, memory-cap hits and instance
    /// rebuilds in `metrics`. Call before sharing the sink.
    pub fn with_metrics(mut self, metrics: Metrics) -> PluginSink {
        self.core_mut().metrics = metrics;
        self
    }

    /// The same sink spending at most `budget` on one claimed batch: a call that failed as a
    /// whole is bisected only while another level of halves can end within it (the worker's
    /// `worker.publish_timeout` less the deadline margin; default [`DEFAULT_BATCH_BUDGET`]).
    /// Call before sharing the sink.
    pub fn with_batch_budget(mut self, budget: Duration) -> PluginSink {
        self.core_mut().batch_budget = budget;
        self
    }

    fn core_mut(&mut self) -> &mut SinkCore {
        Arc::get_mut(&mut self.core).expect("a sink is configured before it is shared")
    }

    /// How many events this sink remembers as suspects: events whose call failed as a whole
    /// before bisection found the culprit in time, published in groups of their own when they
    /// come back.
    pub fn suspects(&self) -> usize {
        self.core.suspects.len()
    }
}

impl PluginSink {
    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The compiled plugin (sha256, size, whether it came from the cache).
    pub fn plugin(&self) -> &CompiledPlugin {
        &self.core.plugin
    }

    /// The plugin's imports, exports and WIT version.
    pub fn world(&self) -> &WorldInfo {
        &self.core.world
    }

    /// Pool counters: a steady `instances_built` across batches shows instances are reused.
    pub fn stats(&self) -> SinkStats {
        SinkStats {
            instances_built: self.core.instances_built.load(Ordering::Relaxed),
            idle_instances: self.core.idle.lock().map_or(0, |idle| idle.len()),
        }
    }
}

#[async_trait]
impl Publisher for PluginSink {
    /// Publishes `batch` on the plugin runtime; dropping the future abandons the calls.
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        let core = self.core.clone();
        self.on_runtime(batch.len(), core.publish_batch(batch.to_vec()))
            .await
    }

    /// Runs the batch's waves on the plugin runtime: one hop there and back for the batch.
    async fn publish_in_waves(&self, batch: &[Event], timeout: Duration) -> Vec<Outcome> {
        let core = self.core.clone();
        self.on_runtime(
            batch.len(),
            core.publish_batch_in_waves(batch.to_vec(), timeout),
        )
        .await
    }
}

impl PluginSink {
    /// The outcomes of `len` events that `publishing` answers, run on the plugin runtime; a
    /// task that failed answers every event retryable.
    async fn on_runtime(
        &self,
        len: usize,
        publishing: impl Future<Output = Vec<Outcome>> + Send + 'static,
    ) -> Vec<Outcome> {
        let task = self.core.engine.runtime().spawn(publishing);
        match AbortOnDropHandle::new(task).await {
            Ok(outcomes) => outcomes,
            Err(join) => {
                let message = format!("sink `{}` failed: {join}", self.core.name);
                vec![Outcome::retryable(message); len]
            }
        }
    }
}

/// An event's size as the plugin receives it: its body and string fields, plus the fixed fields.
pub fn event_size(event: &Event) -> u64 {
    let strings = event.app_code.len()
        + event.event_id.len()
        + event.event_type.len()
        + event.room_id.len()
        + event.body.len();
    strings as u64 + 32
}

/// Compiled component → checked world + `InstancePre` linked with wasi:http (for
/// `outboxd plugin check`, which has no sink to refuse it).
pub(super) fn prepare(
    engine: &PluginEngine,
    path: &std::path::Path,
    component: &Component,
) -> Result<(WorldInfo, PublisherComponentPre<HostState>), PluginError> {
    let info = world::inspect(engine.engine(), path, component)?;
    let pre = world::link(engine.engine(), path, component, true)?;
    Ok((info, pre))
}
