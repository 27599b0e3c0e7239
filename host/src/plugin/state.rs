//! Per-instance store state: the empty WASI context, the wasi:http context and hooks (linked
//! only for sinks that allow hosts), the memory limiter, the deadline, and the host side of the
//! `logging` import and of guest stdout/stderr (both land in `tracing`, secrets redacted), and the
//! `trace` import (the running call's trace contexts); the `broker` import is `broker_host.rs`.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::AsyncWrite;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::outbox::publisher::logging::{self, Level};
use super::bindings::outbox::publisher::trace;
use super::bindings::outbox::publisher::types;
use super::http::{HttpPolicy, SinkHttpHooks};
use super::log_limit::LogLimit;
use super::redact::Redactor;
use crate::broker::Brokers;

/// Stderr lines of one call kept for a trap's reason.
const TAIL_LINES: usize = 3;
/// Longest stderr line kept for a trap's reason.
const TAIL_LINE_CHARS: usize = 300;

/// What every instance of one sink shares: its name, its secrets and its outbound-HTTP policy.
pub(super) struct SinkShared {
    /// The sink's name, tagging every log line.
    pub(super) name: Arc<str>,
    /// The sink's secret config values, kept out of logs and `last_error`.
    pub(super) redactor: Redactor,
    /// Allowlist, timeouts, size cap and rate limit of its wasi:http requests.
    pub(super) http: Arc<HttpPolicy>,
    /// Line rate and length cap of everything its plugin logs.
    pub(super) log_limit: LogLimit,
    /// The broker connections its plugin may publish on (`limits.allow_brokers`).
    pub(super) brokers: Brokers,
}

/// The data of one plugin instance's `Store`.
pub(super) struct HostState {
    /// The sink this instance serves.
    pub(super) sink: Arc<SinkShared>,
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    http_hooks: SinkHttpHooks,
    /// Memory cap, recording whether it was hit.
    pub(super) limiter: MemoryLimiter,
    /// When the running call must end; checked at every epoch tick.
    pub(super) deadline: Option<Instant>,
    /// Set when the epoch callback stopped the guest for overrunning `deadline`.
    pub(super) deadline_hit: bool,
    /// The last stderr lines written during the running call (a panic message, typically).
    stderr_tail: Arc<Mutex<Vec<String>>>,
    /// The trace contexts of the running call's events, by event id (the `trace` import).
    pub(super) traces: HashMap<String, trace::TraceContext>,
}

impl HostState {
    /// State granting nothing: no preopens, environment, arguments or sockets; empty stdin;
    /// stdout and stderr line-buffered into `tracing`. wasi:http requests (when linked) go
    /// through the sink's policy.
    pub(super) fn new(sink: Arc<SinkShared>, memory_cap: u64) -> HostState {
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let wasi = WasiCtx::builder()
            .stdout(GuestOutput::new(sink.clone(), GuestStream::Stdout, None))
            .stderr(GuestOutput::new(
                sink.clone(),
                GuestStream::Stderr,
                Some(stderr_tail.clone()),
            ))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let http_hooks = SinkHttpHooks::new(sink.http.clone());
        HostState {
            sink,
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            http_hooks,
            limiter: MemoryLimiter::new(memory_cap),
            deadline: None,
            deadline_hit: false,
            stderr_tail,
            traces: HashMap::new(),
        }
    }

    /// Starts a guest call that must end by `deadline`.
    pub(super) fn arm(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        if let Ok(mut tail) = self.stderr_tail.lock() {
            tail.clear();
        }
    }

    /// Ends a guest call.
    pub(super) fn disarm(&mut self) {
        self.deadline = None;
    }

    /// The stderr lines of the current call, joined, for a trap's reason.
    pub(super) fn recent_stderr(&self) -> Option<String> {
        let tail = self.stderr_tail.lock().ok()?;
        (!tail.is_empty()).then(|| tail.join(" / "))
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl logging::Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        if !self.sink.log_limit.admit() {
            return;
        }
        let sink = &*self.sink.name;
        let message = self.sink.redactor.redact(&message);
        let message = self.sink.log_limit.cut(&message);
        match level {
            Level::Trace => tracing::trace!(target: "outboxd::plugin", sink, "{message}"),
            Level::Debug => tracing::debug!(target: "outboxd::plugin", sink, "{message}"),
            Level::Info => tracing::info!(target: "outboxd::plugin", sink, "{message}"),
            Level::Warn => tracing::warn!(target: "outboxd::plugin", sink, "{message}"),
            Level::Error => tracing::error!(target: "outboxd::plugin", sink, "{message}"),
        }
    }
}

/// The `trace` import: the trace context of an event of the running call.
impl trace::Host for HostState {
    fn context_of(&mut self, event_id: String) -> Option<trace::TraceContext> {
        self.traces.get(&event_id).cloned()
    }
}

/// The `types` interface holds only types; nothing to implement.
impl types::Host for HostState {}

/// [`StoreLimits`] (memory cap, trap on grow failure) that remembers whether the cap was hit.
pub(super) struct MemoryLimiter {
    limits: StoreLimits,
    /// Set when a memory growth was refused.
    pub(super) hit: bool,
}

impl MemoryLimiter {
    fn new(cap: u64) -> MemoryLimiter {
        MemoryLimiter {
            limits: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(cap).unwrap_or(usize::MAX))
                .trap_on_grow_failure(true)
                .build(),
            hit: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let verdict = self.limits.memory_growing(current, desired, maximum);
        if !matches!(verdict, Ok(true)) {
            self.hit = true;
        }
        verdict
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.hit = true;
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// Which guest output stream.
#[derive(Clone, Copy)]
enum GuestStream {
    Stdout,
    Stderr,
}

/// A guest's stdout or stderr: complete lines go to `tracing` (stdout at info, stderr at warn)
/// tagged with the sink, within the sink's [`LogLimit`] (a line longer than its byte cap is cut
/// and the rest of it dropped). All handles the guest opens share one line buffer.
#[derive(Clone)]
struct GuestOutput {
    sink: Arc<SinkShared>,
    stream: GuestStream,
    pending: Arc<Mutex<PendingLine>>,
    /// Where the last lines are kept (stderr only), skipping Rust's `note: …` hints.
    tail: Option<Arc<Mutex<Vec<String>>>>,
}

impl GuestOutput {
    fn new(
        sink: Arc<SinkShared>,
        stream: GuestStream,
        tail: Option<Arc<Mutex<Vec<String>>>>,
    ) -> GuestOutput {
        GuestOutput {
            sink,
            stream,
            pending: Arc::default(),
            tail,
        }
    }

    /// Logs every complete line of `bytes`; a line reaching the byte cap is logged cut at once
    /// and the rest of it, up to its newline, dropped.
    fn write(&self, mut bytes: &[u8]) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        let max_line = self.sink.log_limit.max_line();
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (piece, rest) = match newline {
                Some(end) => (&bytes[..end], &bytes[end + 1..]),
                None => (bytes, &[][..]),
            };
            bytes = rest;
            if !pending.skipping {
                let room = (max_line + 1).saturating_sub(pending.line.len());
                pending
                    .line
                    .extend_from_slice(&piece[..piece.len().min(room)]);
                if pending.line.len() > max_line {
                    // Over the cap: log what is kept (marked as cut), drop the rest of the line.
                    let line = std::mem::take(&mut pending.line);
                    pending.skipping = true;
                    self.emit(&line, true);
                }
            }
            if newline.is_some() {
                if !pending.skipping {
                    let line = std::mem::take(&mut pending.line);
                    self.emit(&line, false);
                }
                pending.skipping = false;
            }
        }
    }

    /// Logs one line (`cut`: the start of a line over the byte cap).
    fn emit(&self, line: &[u8], cut: bool) {
        let max_line = self.sink.log_limit.max_line();
        let line = String::from_utf8_lossy(&line[..line.len().min(max_line)]);
        let line = self.sink.redactor.redact(line.trim_end_matches('\r'));
        let line = line.as_ref();
        if let Some(Ok(mut tail)) = self.tail.as_ref().map(|t| t.lock())
            && !line.trim().is_empty()
            && !line.starts_with("note: ")
        {
            if tail.len() == TAIL_LINES {
                tail.remove(0);
            }
            tail.push(line.chars().take(TAIL_LINE_CHARS).collect());
        }
        if !self.sink.log_limit.admit() {
            return;
        }
        let marker = if cut {
            "… [rest of line dropped]"
        } else {
            ""
        };
        let sink = &*self.sink.name;
        match self.stream {
            GuestStream::Stdout => {
                tracing::info!(target: "outboxd::plugin", sink, stream = "stdout", "{line}{marker}")
            }
            GuestStream::Stderr => {
                tracing::warn!(target: "outboxd::plugin", sink, stream = "stderr", "{line}{marker}")
            }
        }
    }
}

/// The line a guest stream is writing, and whether the rest of an over-long line is being dropped.
#[derive(Default)]
struct PendingLine {
    line: Vec<u8>,
    skipping: bool,
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
