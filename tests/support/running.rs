//! A worker running in the test's runtime with a sink that reports every delivery: the harness of
//! the wake-up tests (`tests/wake.rs`, `tests/binlog_wake.rs`), which start a worker, commit rows
//! and wait for them to come out; and [`until_loops_wait`], which waits for a worker's loops to
//! go idle (so the rows written next are found by a wake-up or a probe, not by a round).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::wake::Wake;
use outboxd::worker::{RunMode, Worker, WorkerOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{OutboxStore, wait_until};

/// A sink that delivers everything and sends the id of every event it delivers, with when.
struct Deliveries(mpsc::UnboundedSender<(String, Instant)>);

#[async_trait]
impl Publisher for Deliveries {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        for event in batch {
            let _ = self.0.send((event.event_id.clone(), Instant::now()));
        }
        vec![Outcome::Delivered; batch.len()]
    }
}

/// A worker (`RunMode::Forever`) over a store, woken by a [`Wake`], and the deliveries it makes.
pub struct Running {
    shutdown: CancellationToken,
    run: tokio::task::JoinHandle<()>,
    delivered: mpsc::UnboundedReceiver<(String, Instant)>,
}

impl Running {
    /// Starts a worker with `options` over `store`, woken by `wake`.
    pub fn start(store: Arc<dyn OutboxStore>, wake: Wake, options: WorkerOptions) -> Running {
        let (tx, delivered) = mpsc::unbounded_channel();
        let worker = Worker::new(store, Arc::new(Deliveries(tx)), options).with_wake(wake);
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let run = tokio::spawn(async move {
            worker
                .run(RunMode::Forever, token)
                .await
                .expect("worker run");
        });
        Running {
            shutdown,
            run,
            delivered,
        }
    }

    /// The next delivered id and when it was delivered, or a panic naming `what` after `deadline`.
    pub async fn next_within(&mut self, deadline: Duration, what: &str) -> (String, Instant) {
        tokio::time::timeout(deadline, self.delivered.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: not delivered within {deadline:?}"))
            .expect("worker stopped")
    }

    /// Stops the worker (graceful shutdown) and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.run.await.expect("worker task");
    }
}

/// Waits until `loops` loops of the worker woken by `wake` wait for work and `probe` holds of
/// the time until the first probe they planned (`None`: none of them probes, each sleeps until
/// woken), or panics naming `what` after `timeout`.
pub async fn until_loops_wait(
    wake: &Wake,
    loops: usize,
    what: &str,
    timeout: Duration,
    probe: impl Fn(Option<Duration>) -> bool,
) {
    wait_until(what, timeout, || async {
        let (waiting, next_probe) = (wake.waiting_loops(), wake.next_probe_in());
        if waiting == loops && probe(next_probe) {
            Ok(())
        } else {
            Err(format!(
                "{waiting} loops waiting, next probe in {next_probe:?}"
            ))
        }
    })
    .await;
}
