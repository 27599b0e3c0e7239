//! A sink's instances: created and `init`ed under the publish deadline, pooled for reuse, and
//! one guest `publish` call run under the deadline, its failure classified (deadline, memory
//! cap, trap).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use wasmtime::{Store, Trap, UpdateDeadline};

use super::super::bindings::PublisherComponent;
use super::super::bindings::outbox::publisher::trace::TraceContext as WitTraceContext;
use super::super::bindings::outbox::publisher::types::{Event as WitEvent, PublishError};
use super::super::error::{PluginError, boxed};
use super::super::state::HostState;
use super::{MAX_IDLE_INSTANCES, OUTER_TIMEOUT_GRACE, SinkCore};

/// One live plugin instance and its store.
pub(super) struct Instance {
    pub(super) store: Store<HostState>,
    pub(super) bindings: PublisherComponent,
}

impl SinkCore {
    /// Creates a fresh instance and runs `init` on it, under the publish deadline.
    pub(super) async fn instantiate(&self) -> Result<Instance, PluginError> {
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
    pub(super) async fn check_out(&self) -> Result<Instance, PluginError> {
        let reused = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match reused {
            Some(instance) => Ok(instance),
            None => self.instantiate().await,
        }
    }

    /// Returns a healthy instance to the pool (dropping it if the pool is full).
    pub(super) fn check_in(&self, instance: Instance) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_INSTANCES
        {
            idle.push(instance);
        }
    }

    /// Calls `publish` under the deadline and checks the result count.
    pub(super) async fn call_publish(
        &self,
        instance: &mut Instance,
        events: &[WitEvent],
        traces: HashMap<String, WitTraceContext>,
    ) -> Result<Vec<Result<(), PublishError>>, PluginError> {
        let timeout = self.publish_timeout;
        instance.store.data_mut().traces = traces;
        instance.store.data_mut().arm(Instant::now() + timeout);
        // The epoch moved on while the instance sat idle: count ticks from now.
        instance.store.set_epoch_deadline(1);
        let called = tokio::time::timeout(
            timeout + OUTER_TIMEOUT_GRACE,
            instance.bindings.call_publish(&mut instance.store, events),
        )
        .await;
        instance.store.data_mut().disarm();
        instance.store.data_mut().traces.clear();
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
