//! `PluginSink`: one `[[sink]]` running its plugin under its limits (outbound HTTP included),
//! with a small pool of reusable instances; implements [`Publisher`]. What the plugin says
//! (results, `init` errors, traps) has the sink's secret config values redacted.
//!
//! A batch is published as calls of at most `limits.max_batch_size` events and
//! `limits.max_batch_bytes` bytes; an event larger than `limits.max_event_size` fails alone,
//! permanently, without a call. A call that fails as a whole is bisected to find its culprit
//! (`isolate`). Every guest call runs on the plugin runtime (`runtime`), never on the thread
//! of the caller.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use tokio_util::task::AbortOnDropHandle;
use wasmtime::component::Component;
use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::outbox::publisher::types::{Event as WitEvent, PublishError};
use super::bindings::{PublisherComponent, PublisherComponentPre};
use super::engine::{CompiledPlugin, PluginEngine};
use super::error::{PluginError, boxed};
use super::http::HttpPolicy;
use super::isolate::{CallResult, ISOLATION_PARALLELISM, Suspects, isolate};
use super::log_limit::LogLimit;
use super::redact::Redactor;
use super::state::{HostState, SinkShared};
use super::world::{self, WorldInfo};
use crate::config::SinkSpec;
use crate::metrics::{Metrics, PluginFailure};
use crate::publish::{Event, Outcome, Publisher};

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

/// One live plugin instance and its store.
struct Instance {
    store: Store<HostState>,
    bindings: PublisherComponent,
}

impl PluginSink {
    /// Compiles (or loads from the cache) the sink's plugin, checks its world and version, links
    /// it, and creates a first instance, calling `init` with the sink's config. An `init` error
    /// is [`PluginError::Init`] with the plugin's message. wasi:http is linked only when
    /// `limits.allow_hosts` is not empty; a plugin importing it otherwise is
    /// [`PluginError::HttpNotAllowed`].
    pub async fn start(engine: &PluginEngine, sink: &SinkSpec) -> Result<PluginSink, PluginError> {
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

impl SinkCore {
    /// Creates a fresh instance and runs `init` on it, under the publish deadline.
    async fn instantiate(&self) -> Result<Instance, PluginError> {
        let mut store = Store::new(
            self.engine.engine(),
            HostState::new(self.shared.clone(), self.memory_cap),
        );
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut context| {
            let state = context.data_mut();
            match state.deadline {
                Some(deadline) if Instant::now() >= deadline => {
                    state.deadline_hit = true;
                    Err(wasmtime::format_err!("publish deadline exceeded"))
                }
                _ => Ok(UpdateDeadline::Yield(1)),
            }
        });
        self.instances_built.fetch_add(1, Ordering::Relaxed);
        let timeout = self.publish_timeout;
        store.data_mut().arm(Instant::now() + timeout);
        let instantiated = tokio::time::timeout(timeout + OUTER_TIMEOUT_GRACE, async {
            let bindings = self.pre.instantiate_async(&mut store).await?;
            let init = bindings.call_init(&mut store, &self.config).await?;
            Ok::<_, wasmtime::Error>((bindings, init))
        })
        .await;
        let (bindings, init) = match instantiated {
            Err(_elapsed) => return Err(self.deadline_error()),
            Ok(Err(error)) => {
                let failure = self.failure(store.data(), error);
                return Err(match failure {
                    PluginError::Trap { source, .. } => PluginError::Instantiate {
                        sink: self.name.to_string(),
                        source,
                    },
                    other => other,
                });
            }
            Ok(Ok(done)) => done,
        };
        init.map_err(|message| PluginError::Init {
            sink: self.name.to_string(),
            message: self.shared.redactor.redact(&message).into_owned(),
        })?;
        store.data_mut().disarm();
        Ok(Instance { store, bindings })
    }

    /// An idle instance, or a new one.
    async fn check_out(&self) -> Result<Instance, PluginError> {
        let reused = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match reused {
            Some(instance) => Ok(instance),
            None => self.instantiate().await,
        }
    }

    /// Returns a healthy instance to the pool (dropping it if the pool is full).
    fn check_in(&self, instance: Instance) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_INSTANCES
        {
            idle.push(instance);
        }
    }

    /// Publishes a claimed batch: events over `max_event_size` fail alone; the others go out in
    /// calls of at most `max_batch_size` events and `max_batch_bytes` bytes, one after the other,
    /// and suspects in calls of their own group beside them; each call is isolated when it
    /// fails as a whole. Runs on the plugin runtime.
    async fn publish_batch(self: Arc<Self>, batch: Vec<Event>) -> Vec<Outcome> {
        let deadline = Instant::now() + self.batch_budget;
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut plain = Vec::with_capacity(batch.len());
        let mut suspect_groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (position, event) in batch.iter().enumerate() {
            let size = event_size(event);
            if size > self.max_event_size {
                outcomes[position] = Some(Outcome::permanent(format!(
                    "event of {size} bytes exceeds sink `{}`'s limits.max_event_size ({} bytes)",
                    self.name, self.max_event_size
                )));
            } else if let Some(group) = self.suspects.group_of(&event.event_id) {
                suspect_groups.entry(group).or_default().push(position);
            } else {
                plain.push(position);
            }
        }
        let plain = self.pack(&batch, plain);
        let suspects: Vec<Vec<usize>> = suspect_groups
            .into_values()
            .flat_map(|group| self.pack(&batch, group))
            .collect();
        let this = &self;
        let batch = &batch;
        let calls = |calls: Vec<Vec<usize>>, at_once: usize| {
            stream::iter(calls)
                .map(move |positions| {
                    isolate(
                        positions,
                        deadline,
                        this.publish_timeout,
                        move |positions| this.call(batch, positions),
                    )
                })
                .buffered(at_once)
                .collect::<Vec<_>>()
        };
        // The batch's calls one after the other, as the deadlines are configured; the suspect
        // groups side by side with them, so that a group that runs into its deadline again
        // costs the others no time.
        let (plain, suspects) =
            futures::join!(calls(plain, 1), calls(suspects, ISOLATION_PARALLELISM));
        for found in plain.into_iter().chain(suspects) {
            if found.calls > 1 {
                tracing::warn!(sink = %self.name, calls = found.calls, failed_alone = found.failed_alone,
                    outage = found.outage, unresolved = found.unresolved.iter().map(Vec::len).sum::<usize>(),
                    "plugin call failed as a whole; published its events again in halves to find the culprit");
            }
            // Answered events are suspects no more; the groups left unresolved are halved.
            self.suspects.forget(
                found
                    .outcomes
                    .iter()
                    .map(|(p, _)| batch[*p].event_id.as_str()),
            );
            self.suspects
                .record(&found.unresolved, |p| batch[p].event_id.as_str());
            for (position, outcome) in found.outcomes {
                outcomes[position] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|| Outcome::retryable("the sink gave no result")))
            .collect()
    }

    /// `positions` split, in order, into calls of at most `max_batch_size` events and
    /// `max_batch_bytes` bytes (an event alone may reach `max_event_size`).
    fn pack(&self, batch: &[Event], positions: Vec<usize>) -> Vec<Vec<usize>> {
        let mut calls = Vec::new();
        let mut call = Vec::new();
        let mut bytes = 0u64;
        for position in positions {
            let size = event_size(&batch[position]);
            if !call.is_empty()
                && (call.len() >= self.max_batch_size || bytes + size > self.max_batch_bytes)
            {
                calls.push(std::mem::take(&mut call));
                bytes = 0;
            }
            call.push(position);
            bytes += size;
        }
        if !call.is_empty() {
            calls.push(call);
        }
        calls
    }

    /// One `publish` call with the events at `positions`: their outcomes, or why the call failed
    /// as a whole (the instance is then discarded and the failure counted).
    async fn call(&self, batch: &[Event], positions: Vec<usize>) -> CallResult {
        let wit_events: Vec<WitEvent> = positions.iter().map(|&p| to_wit(&batch[p])).collect();
        let called = match self.check_out().await {
            Ok(mut instance) => {
                let results = self.call_publish(&mut instance, &wit_events).await;
                if results.is_ok() {
                    self.check_in(instance);
                }
                results
            }
            Err(error) => Err(error),
        };
        match called {
            Ok(results) => Ok(positions
                .into_iter()
                .zip(results)
                .map(|(position, result)| {
                    let outcome = to_outcome(result, &self.shared.redactor, self.max_retry_after);
                    (position, outcome)
                })
                .collect()),
            Err(error) => {
                let kind = match error {
                    PluginError::Deadline { .. } => PluginFailure::deadline,
                    PluginError::MemoryCap { .. } => PluginFailure::memory_limit,
                    _ => PluginFailure::trap,
                };
                self.metrics.count_plugin_failure(&self.name, kind);
                tracing::debug!(sink = %self.name, error = %error, events = positions.len(), "plugin call failed; instance discarded");
                Err(error.to_string())
            }
        }
    }

    /// Calls `publish` under the deadline and checks the result count.
    async fn call_publish(
        &self,
        instance: &mut Instance,
        events: &[WitEvent],
    ) -> Result<Vec<Result<(), PublishError>>, PluginError> {
        let timeout = self.publish_timeout;
        instance.store.data_mut().arm(Instant::now() + timeout);
        // The epoch moved on while the instance sat idle: count ticks from now.
        instance.store.set_epoch_deadline(1);
        let called = tokio::time::timeout(
            timeout + OUTER_TIMEOUT_GRACE,
            instance.bindings.call_publish(&mut instance.store, events),
        )
        .await;
        instance.store.data_mut().disarm();
        self.shared.log_limit.flush();
        let results = match called {
            Err(_elapsed) => return Err(self.deadline_error()),
            Ok(Err(error)) => return Err(self.failure(instance.store.data(), error)),
            Ok(Ok(results)) => results,
        };
        if results.len() != events.len() {
            return Err(PluginError::ResultCount {
                sink: self.name.to_string(),
                got: results.len(),
                expected: events.len(),
            });
        }
        Ok(results)
    }

    fn deadline_error(&self) -> PluginError {
        PluginError::Deadline {
            sink: self.name.to_string(),
            timeout: self.publish_timeout,
        }
    }

    /// Classifies a failed guest call: deadline, memory cap, or another trap.
    fn failure(&self, state: &HostState, error: wasmtime::Error) -> PluginError {
        if state.deadline_hit {
            return self.deadline_error();
        }
        if state.limiter.hit {
            return PluginError::MemoryCap {
                sink: self.name.to_string(),
                limit: self.memory_cap,
            };
        }
        let mut reason = match error.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            None => self.shared.redactor.redact(&error.to_string()).into_owned(),
        };
        if let Some(stderr) = state.recent_stderr() {
            reason = format!("{reason} (stderr: {stderr})");
        }
        PluginError::Trap {
            sink: self.name.to_string(),
            reason,
            source: boxed(error),
        }
    }
}

#[async_trait]
impl Publisher for PluginSink {
    /// Publishes `batch` on the plugin runtime; dropping the future abandons the calls.
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        let core = self.core.clone();
        let task = self
            .core
            .engine
            .runtime()
            .spawn(core.publish_batch(batch.to_vec()));
        match AbortOnDropHandle::new(task).await {
            Ok(outcomes) => outcomes,
            Err(join) => {
                let message = format!("sink `{}` failed: {join}", self.core.name);
                vec![Outcome::retryable(message); batch.len()]
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

fn to_wit(event: &Event) -> WitEvent {
    WitEvent {
        app_code: event.app_code.clone(),
        event_id: event.event_id.clone(),
        event_type: event.event_type.clone(),
        room_id: event.room_id.clone(),
        room_version: event.room_version,
        occurred_at_ms: event.occurred_at_ms,
        body: event.body.clone(),
        attempt: event.attempt,
    }
}

/// Maps one plugin result onto the worker's outcome, secrets redacted from its message and a
/// retry-after cut to `max_retry_after` (the message then says so).
fn to_outcome(
    result: Result<(), PublishError>,
    redactor: &Redactor,
    max_retry_after: Duration,
) -> Outcome {
    let clean = |message: String| redactor.redact(&message).into_owned();
    match result {
        Ok(()) => Outcome::Delivered,
        Err(PublishError::Retryable(message)) => Outcome::retryable(clean(message)),
        Err(PublishError::Permanent(message)) => Outcome::permanent(clean(message)),
        Err(PublishError::RateLimited(limit)) => {
            let asked = Duration::from_millis(limit.retry_after_ms);
            let mut message = clean(limit.message);
            if asked > max_retry_after {
                message = format!(
                    "{message} (retry-after {} cut to limits.max_retry_after {})",
                    humantime::format_duration(asked),
                    humantime::format_duration(max_retry_after)
                );
            }
            Outcome::Retryable {
                message,
                retry_after: Some(asked.min(max_retry_after)),
            }
        }
    }
}
