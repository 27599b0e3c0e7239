//! The protobuf `EventEnvelope` (`proto/outbox/v1/envelope.proto`), compiled by prost at build time.
//!
//! Producers in other languages serialize the same message from the `.proto` file; this module is
//! the Rust side of that contract.

#![allow(missing_docs)] // generated code; the .proto file carries the field documentation

include!(concat!(env!("OUT_DIR"), "/outbox.v1.rs"));
