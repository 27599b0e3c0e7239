//! `outboxd plugin bench FILE`: events per second and cost per event of one plugin on sample
//! events, no database, so an author sees what their code costs.
//!
//! The plugin runs as a sink named `bench` with default limits (`max_batch_size` = the batch
//! size, outbound HTTP to `--allow-host` origins): started once (compile or cache, instantiate,
//! `init`; timed apart), one warm-up batch, then batches of the sample events (cycled, each copy
//! with its own event id) until the asked number of events went through `publish`. The figure
//! covers the host's side (copying events in and results out) and the plugin's own work; the
//! plugin's log lines are counted by the caller's log filter, not here.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use outboxd::config::{PluginSettings, SinkConfig, SinkLimits, SinkSpec};
use outboxd::plugin::{CacheOutcome, PluginEngine, PluginError, PluginSink};
use outboxd::publish::{Event, Outcome, Publisher};

/// What to measure.
#[derive(Debug, Clone)]
pub struct PluginBenchOptions {
    /// The `.wasm` component.
    pub path: PathBuf,
    /// Settings passed to `init`.
    pub config: Vec<(String, String)>,
    /// Origins the plugin may call over wasi:http.
    pub allow_hosts: Vec<String>,
    /// Sample events, cycled to fill the batches (at least one).
    pub samples: Vec<Event>,
    /// Events to publish in the measured run (after one warm-up batch).
    pub events: usize,
    /// Events per `publish` call.
    pub batch_size: usize,
    /// Where precompiled artifacts are cached.
    pub settings: PluginSettings,
}

/// What `outboxd plugin bench` measured; `Display` prints it for humans.
#[derive(Debug, Clone)]
pub struct PluginBenchReport {
    /// The plugin file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Compile (or cache load), link, instantiate and `init`.
    pub start: Duration,
    /// Whether the compiled artifact came from the cache.
    pub cache: CacheOutcome,
    /// Events published in the measured run.
    pub events: usize,
    /// Events per `publish` call.
    pub batch_size: usize,
    /// Wall time of the measured run.
    pub elapsed: Duration,
    /// Median `publish` call of the measured run.
    pub batch_median: Duration,
    /// Slowest `publish` call of the measured run.
    pub batch_max: Duration,
    /// Outcomes of the measured run: delivered, retryable, permanent.
    pub delivered: usize,
    /// Events the plugin answered retryable (rate-limited included).
    pub retryable: usize,
    /// Events the plugin answered permanent.
    pub permanent: usize,
    /// The first non-delivered outcome's message, if any.
    pub first_problem: Option<String>,
}

impl PluginBenchReport {
    /// Events per second of the measured run.
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Wall time per event of the measured run.
    pub fn per_event(&self) -> Duration {
        self.elapsed / u32::try_from(self.events.max(1)).unwrap_or(u32::MAX)
    }
}

impl fmt::Display for PluginBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cache = match self.cache {
            CacheOutcome::Hit => "precompiled artifact from the cache",
            CacheOutcome::Stored => "compiled, artifact stored in the cache",
            CacheOutcome::Disabled => "compiled, no cache",
        };
        writeln!(
            f,
            "plugin:     {} ({} bytes)",
            self.path.display(),
            self.size
        )?;
        writeln!(
            f,
            "start:      {:.3} s ({cache}; instantiate and init included)",
            self.start.as_secs_f64()
        )?;
        writeln!(
            f,
            "run:        {} events in batches of {}: {:.3} s (after one warm-up batch)",
            self.events,
            self.batch_size,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "throughput: {:.0} events/s, {:.2} µs per event",
            self.events_per_second(),
            self.per_event().as_secs_f64() * 1e6
        )?;
        writeln!(
            f,
            "batch:      median {:.3} ms, slowest {:.3} ms",
            self.batch_median.as_secs_f64() * 1e3,
            self.batch_max.as_secs_f64() * 1e3
        )?;
        write!(
            f,
            "outcomes:   {} delivered, {} retryable, {} permanent",
            self.delivered, self.retryable, self.permanent
        )?;
        if let Some(problem) = &self.first_problem {
            write!(f, "\nfirst non-delivered: {problem}")?;
        }
        Ok(())
    }
}

/// Runs the benchmark described by `options`.
pub async fn bench_plugin(options: &PluginBenchOptions) -> Result<PluginBenchReport, PluginError> {
    let batch_size = options.batch_size.max(1);
    let engine = PluginEngine::new(&options.settings)?;
    let sink = SinkConfig {
        breaker: Default::default(),
        name: "bench".to_string(),
        plugin: options.path.clone(),
        config: options.config.iter().cloned().collect(),
        limits: SinkLimits {
            allow_hosts: options.allow_hosts.clone(),
            max_batch_size: u32::try_from(batch_size).unwrap_or(u32::MAX),
            ..SinkLimits::default()
        },
    };
    let sink = SinkSpec::new(sink).map_err(|e| PluginError::InvalidLimits {
        sink: "bench".to_string(),
        reason: e.to_string(),
    })?;
    let started = Instant::now();
    let sink = PluginSink::start(&engine, &sink).await?;
    let start = started.elapsed();

    let batches = batches(&options.samples, options.events, batch_size);
    sink.publish(&batches[0]).await; // warm-up: first-call costs out of the figure
    let mut timings = Vec::with_capacity(batches.len());
    let mut report = PluginBenchReport {
        path: options.path.clone(),
        size: sink.plugin().size,
        start,
        cache: sink.plugin().cache,
        events: 0,
        batch_size,
        elapsed: Duration::ZERO,
        batch_median: Duration::ZERO,
        batch_max: Duration::ZERO,
        delivered: 0,
        retryable: 0,
        permanent: 0,
        first_problem: None,
    };
    let run = Instant::now();
    for batch in &batches {
        let call = Instant::now();
        let outcomes = sink.publish(batch).await;
        timings.push(call.elapsed());
        report.events += batch.len();
        count(&mut report, &outcomes);
    }
    report.elapsed = run.elapsed();
    timings.sort();
    report.batch_median = timings[timings.len() / 2];
    report.batch_max = timings[timings.len() - 1];
    Ok(report)
}

/// `events` copies of `samples` (cycled; each with the event id `<sample id>-<n>`) in batches of
/// `batch_size`; at least one batch.
fn batches(samples: &[Event], events: usize, batch_size: usize) -> Vec<Vec<Event>> {
    let fallback = [Event {
        app_code: outboxd::record::DEFAULT_APP_CODE.to_string(),
        event_id: "evt_bench".to_string(),
        event_type: "RoomGiftSent".to_string(),
        room_id: "room-1".to_string(),
        room_version: 1,
        occurred_at_ms: outboxd::record::now_ms(),
        body: Vec::new(),
        attempt: 1,
        trace: None,
    }];
    let samples = if samples.is_empty() {
        &fallback[..]
    } else {
        samples
    };
    let all: Vec<Event> = (0..events.max(1))
        .map(|n| {
            let mut event = samples[n % samples.len()].clone();
            event.event_id = format!("{}-{n}", event.event_id);
            event
        })
        .collect();
    all.chunks(batch_size).map(<[Event]>::to_vec).collect()
}

/// Adds `outcomes` to the report's counters.
fn count(report: &mut PluginBenchReport, outcomes: &[Outcome]) {
    for outcome in outcomes {
        let problem = match outcome {
            Outcome::Delivered => {
                report.delivered += 1;
                continue;
            }
            // A lone plugin has no breaker: a deferred outcome never reaches the benchmark, and
            // would count as not delivered yet.
            Outcome::Retryable { message, .. } | Outcome::Deferred { message, .. } => {
                report.retryable += 1;
                message
            }
            Outcome::Permanent { message } => {
                report.permanent += 1;
                message
            }
        };
        if report.first_problem.is_none() {
            report.first_problem = Some(problem.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str) -> Event {
        Event {
            app_code: "a".into(),
            event_id: id.into(),
            event_type: "T".into(),
            room_id: "r".into(),
            room_version: 1,
            occurred_at_ms: 0,
            body: vec![1, 2],
            attempt: 1,
            trace: None,
        }
    }

    #[test]
    fn batches_cycle_the_samples_with_distinct_ids() {
        let batches = batches(&[sample("x"), sample("y")], 5, 2);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
        let ids: Vec<&str> = batches
            .iter()
            .flatten()
            .map(|e| e.event_id.as_str())
            .collect();
        assert_eq!(ids, ["x-0", "y-1", "x-2", "y-3", "x-4"]);
        assert_eq!(super::batches(&[], 0, 10).len(), 1, "never empty");
    }
}
