//! The W3C trace context of the events being published (the `trace` import, WIT `0.1.2`): what a
//! plugin passes on downstream so the receiver's work joins the trace that began in the
//! producer's transaction.
//!
//! ```ignore
//! let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
//! headers.extend(outboxd_plugin::trace::headers_of(event)); // traceparent, tracestate
//! ```
//!
//! Outside a component (native unit tests) no event has a context: pass one to your own code
//! to test what it does with it.

use crate::Event;
pub use crate::bindings::outbox::publisher::trace::TraceContext;

/// The trace context of `event` (an event of the batch being published): the producer's, as
/// written with the event; `None` when the event carries none.
pub fn context(event: &Event) -> Option<TraceContext> {
    #[cfg(target_family = "wasm")]
    return crate::bindings::outbox::publisher::trace::context_of(&event.event_id);
    #[cfg(not(target_family = "wasm"))]
    {
        let _ = event;
        None
    }
}

/// `context` as header name and value pairs: `traceparent`, then `tracestate` unless it is empty.
pub fn headers(context: &TraceContext) -> Vec<(String, String)> {
    let mut headers = vec![("traceparent".to_string(), context.traceparent.clone())];
    if !context.tracestate.is_empty() {
        headers.push(("tracestate".to_string(), context.tracestate.clone()));
    }
    headers
}

/// The trace headers of `event` in one call: [`headers`] of its [`context`], none without one.
pub fn headers_of(event: &Event) -> Vec<(String, String)> {
    context(event).map_or_else(Vec::new, |context| headers(&context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_leave_out_an_empty_tracestate() {
        let mut context = TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: String::new(),
        };
        assert_eq!(
            headers(&context),
            [("traceparent".to_string(), context.traceparent.clone())]
        );
        context.tracestate = "rojo=00f067aa0ba902b7".into();
        assert_eq!(headers(&context)[1].1, "rojo=00f067aa0ba902b7");
    }
}
