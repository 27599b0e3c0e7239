//! `outboxd-plugin`: the guest SDK for outboxd publisher plugins written in Rust.
//!
//! A plugin is a type implementing [`Plugin`] (build it from the sink's settings in
//! [`Plugin::init`], publish a batch in [`Plugin::publish`]) exported with [`export_plugin!`];
//! built for `wasm32-wasip2` as a `cdylib`, it is a component of the `outbox:publisher` world
//! (`wit/publisher.wit`).
//!
//! ```ignore
//! use outboxd_plugin::{Config, Event, Plugin, PublishError, export_plugin, log};
//!
//! struct Hello { greeting: String }
//!
//! impl Plugin for Hello {
//!     const NAME: &'static str = "hello";
//!     fn init(mut config: Config) -> Result<Self, String> {
//!         let greeting = config.optional("greeting").unwrap_or_else(|| "hi".into());
//!         config.finish()?; // any other key is an error naming it
//!         Ok(Hello { greeting })
//!     }
//!     fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>> {
//!         batch.iter().map(|event| { log::info(&format!("{} {}", self.greeting, event.event_id)); Ok(()) }).collect()
//!     }
//! }
//!
//! export_plugin!(Hello);
//! ```
//!
//! # Layout
//! - [`bindings`]: the WIT bindings, generated once from `wit/` (types re-exported at the root:
//!   [`Event`], [`PublishError`], [`RateLimit`]);
//! - [`Plugin`] and [`export_plugin!`]: the one trait and the one macro (glue in `runtime`);
//! - [`config`]: typed parsing of the sink's settings, errors naming the key;
//! - [`event_json`]: the event's JSON form, the one definition every plugin sending JSON uses;
//! - [`log`]: lines into outboxd's log;
//! - [`trace`]: an event's W3C trace context and its headers, to pass on downstream;
//! - `http` (feature `http`): a batch of requests sent concurrently over wasi:http, timeouts,
//!   and the classification of answers into publish results;
//! - `broker` (feature `broker`): publishing confirmed messages on the host's `[[broker]]`
//!   connections (the plugin then targets the `broker-publisher` world).

#![warn(missing_docs)]

#[cfg(feature = "broker")]
pub mod broker;
pub mod config;
pub mod event_json;
#[cfg(feature = "http")]
pub mod http;
pub mod log;
#[doc(hidden)]
pub mod runtime;
pub mod trace;

/// The bindings of the `outbox:publisher/publisher` world, generated from `wit/publisher.wit`.
#[cfg(not(feature = "broker"))]
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "publisher",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_publisher",
        default_bindings_module: "outboxd_plugin::bindings",
    });
}

/// The bindings of the `outbox:publisher/broker-publisher` world (`publisher` plus the `broker`
/// import), generated from `wit/publisher.wit`.
#[cfg(feature = "broker")]
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "broker-publisher",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_publisher",
        default_bindings_module: "outboxd_plugin::bindings",
    });
}

pub use bindings::outbox::publisher::types::{Event, PublishError, RateLimit};
pub use config::{Config, ConfigError};

/// A publisher plugin: the state of one instance, built by [`init`](Plugin::init) from the
/// sink's settings and used by every [`publish`](Plugin::publish) of that instance.
///
/// outboxd may run several instances of a plugin (one per concurrent batch) and replace one at
/// any time (after a trap or a missed deadline); each gets its own `init`.
pub trait Plugin: Sized + 'static {
    /// Short name used in messages the SDK writes for the plugin, e.g. `"webhook"` gives
    /// `webhook plugin: …`.
    const NAME: &'static str;

    /// Builds the instance from the sink's `config` table. An error stops the sink at outboxd's
    /// start; it is shown as `NAME plugin: MESSAGE`.
    fn init(config: Config) -> Result<Self, String>;

    /// Publishes `batch`: exactly one result per event, in order. `Ok(())` delivered;
    /// [`PublishError::Retryable`] retried by the retry policy; [`PublishError::RateLimited`]
    /// retried after its delay; [`PublishError::Permanent`] never retried (the row is `failed`).
    fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>>;
}

/// Exports a [`Plugin`] type as the component's `init` and `publish`. Use once per plugin crate:
/// `outboxd_plugin::export_plugin!(MyPlugin);`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        const _: () = {
            ::std::thread_local! {
                static INSTANCE: ::core::cell::RefCell<::core::option::Option<$plugin>> =
                    const { ::core::cell::RefCell::new(::core::option::Option::None) };
            }

            struct Export;

            impl $crate::bindings::Guest for Export {
                fn init(
                    config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::runtime::init::<$plugin>(&INSTANCE, config)
                }

                fn publish(
                    batch: ::std::vec::Vec<$crate::Event>,
                ) -> ::std::vec::Vec<::core::result::Result<(), $crate::PublishError>> {
                    $crate::runtime::publish::<$plugin>(&INSTANCE, &batch)
                }
            }

    $crate::bindings::export_publisher!(Export with_types_in $crate::bindings);
        };
    };
}
