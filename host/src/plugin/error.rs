//! `PluginError`: everything that can go wrong loading, checking or running a publisher plugin.

use std::path::PathBuf;
use std::time::Duration;

/// A boxed error source (wasmtime's own error type, converted, or an I/O error).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure of the plugin host. Load-time variants stop outboxd at start with one clear message;
/// the batch-time variants (`Deadline`, `MemoryCap`, `Trap`, `ResultCount`, `Instantiate`)
/// become the `last_error` of a batch that is retried.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin file could not be read (missing, unreadable).
    #[error("cannot read plugin {}: {source}", path.display())]
    Read {
        /// The plugin's path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a WebAssembly component.
    #[error("{} is not a WebAssembly component: {reason}", path.display())]
    NotAComponent {
        /// The plugin's path.
        path: PathBuf,
        /// What it is instead, and how to fix it.
        reason: String,
    },
    /// The component does not compile or validate.
    #[error("cannot compile plugin {}: {source}", path.display())]
    Compile {
        /// The plugin's path.
        path: PathBuf,
        /// wasmtime's error.
        #[source]
        source: BoxError,
    },
    /// The component was built against an incompatible version of `outbox:publisher`.
    #[error(
        "plugin {} was built for {found}, but this host speaks outbox:publisher@{supported} \
         (only semver-compatible versions load; rebuild the plugin against wit/publisher.wit)",
        path.display()
    )]
    Version {
        /// The plugin's path.
        path: PathBuf,
        /// The versioned name the plugin imports, e.g. `outbox:publisher/types@0.2.0`.
        found: String,
        /// The compatibility track this host loads, e.g. `0.1.x`.
        supported: &'static str,
    },
    /// The component does not implement the `outbox:publisher/publisher` world.
    #[error("plugin {} does not implement the outbox:publisher/publisher world: {reason}", path.display())]
    WrongWorld {
        /// The plugin's path.
        path: PathBuf,
        /// What is missing or mistyped.
        reason: String,
    },
    /// The component imports an interface outside what the host provides.
    #[error(
        "plugin {} imports `{import}`, which this host does not provide (it provides \
         outbox:publisher/* (broker to sinks with limits.allow_brokers), WASI 0.2 cli, clocks, filesystem, io, random and sockets, and \
         wasi:http 0.2 to sinks with limits.allow_hosts)",
        path.display()
    )]
    UnsupportedImport {
        /// The plugin's path.
        path: PathBuf,
        /// The import's name.
        import: String,
    },
    /// The component's imports cannot be satisfied (an item missing from a provided interface).
    #[error("plugin {} cannot be linked: {source}", path.display())]
    Link {
        /// The plugin's path.
        path: PathBuf,
        /// wasmtime's linker error, naming the import.
        #[source]
        source: BoxError,
    },
    /// The precompiled-artifact cache directory is unusable.
    #[error("plugin cache directory {}: {source}", dir.display())]
    Cache {
        /// The cache directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The wasmtime engine could not be created.
    #[error("cannot create the WebAssembly engine: {source}")]
    Engine {
        /// wasmtime's error.
        #[source]
        source: BoxError,
    },
    /// A sink's limits are unusable (an `allow_hosts` entry that is no origin).
    #[error("sink `{sink}`: {reason}")]
    InvalidLimits {
        /// The sink's name.
        sink: String,
        /// Which limit and why.
        reason: String,
    },
    /// The plugin imports wasi:http but its sink allows no host.
    #[error(
        "sink `{sink}`: plugin {} imports wasi:http (outbound HTTP), but the sink allows no \
         host: set `limits.allow_hosts`, e.g. `limits = {{ allow_hosts = [\"https://api.example.com\"] }}`",
        path.display()
    )]
    HttpNotAllowed {
        /// The sink's name.
        sink: String,
        /// The plugin's path.
        path: PathBuf,
    },
    /// The plugin imports the `broker` interface but its sink may use no broker connection.
    #[error(
        "sink `{sink}`: plugin {} imports outbox:publisher/broker (publishing to message \
         brokers), but the sink may use no broker connection: name [[broker]] connections in \
         `limits.allow_brokers`, e.g. `limits = {{ allow_brokers = [\"events\"] }}`",
        path.display()
    )]
    BrokerNotAllowed {
        /// The sink's name.
        sink: String,
        /// The plugin's path.
        path: PathBuf,
    },
    /// The plugin's `init` returned an error; the sink cannot start.
    #[error("sink `{sink}`: plugin init failed: {message}")]
    Init {
        /// The sink's name.
        sink: String,
        /// The plugin's message.
        message: String,
    },
    /// A fresh instance could not be created or initialised.
    #[error("plugin `{sink}` could not be instantiated: {source}")]
    Instantiate {
        /// The sink's name.
        sink: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A call overran the sink's `publish_timeout`.
    #[error("plugin `{sink}` exceeded its {} publish deadline", humantime::format_duration(*timeout))]
    Deadline {
        /// The sink's name.
        sink: String,
        /// The deadline.
        timeout: Duration,
    },
    /// The instance tried to grow its memory past the sink's cap.
    #[error("plugin `{sink}` exceeded its memory cap of {limit} bytes")]
    MemoryCap {
        /// The sink's name.
        sink: String,
        /// The cap, in bytes.
        limit: u64,
    },
    /// The instance trapped (a Rust guest's panic is a trap).
    #[error("plugin `{sink}` trapped: {reason}")]
    Trap {
        /// The sink's name.
        sink: String,
        /// The trap's short description.
        reason: String,
        /// wasmtime's full error, with the wasm backtrace when available.
        #[source]
        source: BoxError,
    },
    /// `publish` returned a result list of the wrong length.
    #[error("plugin `{sink}` returned {got} results for {expected} events")]
    ResultCount {
        /// The sink's name.
        sink: String,
        /// Results returned.
        got: usize,
        /// Events in the batch.
        expected: usize,
    },
    /// A `--config` argument of `outboxd plugin test` is not `key=value`.
    #[error("invalid --config `{0}`: expected key=value")]
    ConfigPair(String),
    /// An `--event` argument of `outboxd plugin test` is not a valid event.
    #[error("invalid --event #{index}: {reason}")]
    EventJson {
        /// 0-based position of the argument.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Converts wasmtime's error (which does not implement `std::error::Error`) into a source.
pub(crate) fn boxed(error: wasmtime::Error) -> BoxError {
    error.into_boxed_dyn_error()
}
