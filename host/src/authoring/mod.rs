//! Tools for plugin authors behind `outboxd plugin new` and `outboxd plugin bench` (`plugin
//! check|test` are in [`crate::plugin::check`]).
//!
//! - [`scaffold`]: a new plugin project in Rust, Python or JavaScript from `plugins/templates/`;
//! - [`bench`]: events per second and cost per event of one plugin, no database.

pub mod bench;
pub mod scaffold;

pub use bench::{PluginBenchOptions, PluginBenchReport, bench_plugin};
pub use scaffold::{Lang, ScaffoldError, ScaffoldOptions, scaffold};
