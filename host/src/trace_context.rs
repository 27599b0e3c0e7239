//! The W3C Trace Context an event carries from its producer (envelope fields `traceparent` and
//! `tracestate`): [`TraceContext`], checked the way every producer library checks it
//! (`producers/SPEC.md`, "Trace context"; `producers/golden/envelopes.json`,
//! `traceparent_checks`).

use thiserror::Error;

/// Longest `tracestate` accepted, in characters (the W3C recommendation: 32 members, 512 bytes).
pub const TRACESTATE_MAX: usize = 512;

/// Longest `traceparent` accepted, in characters (Unicode scalar values). Version `00` is exactly
/// 55; a later version may go on after a further `-`, and W3C Trace Context sets no bound on what
/// follows, so without one an arbitrarily long value would be stored in every envelope. Every
/// producer library refuses the same values (`producers/SPEC.md`, "Trace context").
pub const TRACEPARENT_MAX: usize = 256;

/// A `tracestate` list member longer than this is the first to go when a span's trace state
/// must be cut to [`TRACESTATE_MAX`] (W3C Trace Context, "tracestate Limits").
const LONG_MEMBER: usize = 128;

/// A producer's span context as W3C Trace Context header values: a checked `traceparent` and
/// its `tracestate` (empty when none).
///
/// ```
/// use outboxd::trace_context::TraceContext;
///
/// let context = TraceContext::new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")?;
/// assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert!(TraceContext::new("00-4bf92f35-00f067aa0ba902b7-01", "").is_err());
/// # Ok::<(), outboxd::trace_context::InvalidTraceContext>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: String,
}

/// Appends `bytes` as lowercase hex digits.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
}

/// Why a trace context was refused; names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidTraceContext {
    /// `traceparent` is not a W3C traceparent.
    #[error("traceparent {value:?} is not a W3C traceparent ({reason})")]
    Traceparent {
        /// The value refused (at most 80 characters of it).
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `tracestate` is longer than [`TRACESTATE_MAX`] characters or not printable ASCII.
    #[error("tracestate must be at most {TRACESTATE_MAX} characters of printable ASCII")]
    Tracestate,
}

impl TraceContext {
    /// A checked trace context: `traceparent` a W3C traceparent (version: two lowercase hex
    /// digits, not `ff`; trace id of 32 and parent id of 16 lowercase hex digits, not all zeros;
    /// flags of two; joined by `-`; version `00` exactly 55 characters, a later version may go
    /// on after a further `-`, to at most [`TRACEPARENT_MAX`] characters in all), `tracestate`
    /// at most [`TRACESTATE_MAX`] characters of printable ASCII (empty: none).
    pub fn new(
        traceparent: impl Into<String>,
        tracestate: impl Into<String>,
    ) -> Result<TraceContext, InvalidTraceContext> {
        let (traceparent, tracestate) = (traceparent.into(), tracestate.into());
        if let Err(reason) = check_traceparent(&traceparent) {
            return Err(InvalidTraceContext::Traceparent {
                value: traceparent.chars().take(80).collect(),
                reason,
            });
        }
        if tracestate.len() > TRACESTATE_MAX
            || !tracestate.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(InvalidTraceContext::Tracestate);
        }
        Ok(TraceContext {
            traceparent,
            tracestate,
        })
    }

    /// The context of a span outboxd made itself (ids never zero, `flags` its trace flags) with
    /// a `tracestate` taken from a checked context: nothing to check again.
    pub(crate) fn of_span(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        flags: u8,
        tracestate: &str,
    ) -> TraceContext {
        let mut traceparent = String::with_capacity(55);
        traceparent.push_str("00-");
        push_hex(&mut traceparent, &trace_id);
        traceparent.push('-');
        push_hex(&mut traceparent, &span_id);
        traceparent.push('-');
        push_hex(&mut traceparent, &[flags]);
        debug_assert!(check_traceparent(&traceparent).is_ok(), "{traceparent}");
        TraceContext {
            traceparent,
            tracestate: tracestate.to_string(),
        }
    }

    /// The context of OpenTelemetry's current span (`opentelemetry::Context::current()`, as
    /// `Tracer::in_span` or an attached context sets it), or `None` when no valid span is
    /// current. Its trace state is cut to [`TRACESTATE_MAX`] characters by whole list members, as
    /// the other producer libraries cut a span's (an event must not fail for it).
    ///
    /// ```
    /// use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
    /// use outboxd::trace_context::TraceContext;
    ///
    /// assert_eq!(TraceContext::current(), None);
    /// let span = SpanContext::new(
    ///     TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
    ///     SpanId::from_hex("00f067aa0ba902b7").unwrap(),
    ///     TraceFlags::SAMPLED,
    ///     true,
    ///     TraceState::default(),
    /// );
    /// let _attached = opentelemetry::Context::current().with_remote_span_context(span).attach();
    /// let context = TraceContext::current().unwrap();
    /// assert_eq!(context.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /// ```
    pub fn current() -> Option<TraceContext> {
        use opentelemetry::trace::TraceContextExt;
        let context = opentelemetry::Context::current();
        let span = context.span();
        let span = span.span_context();
        if !span.is_valid() {
            return None;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        );
        let tracestate = fit_tracestate(&span.trace_state().header());
        TraceContext::new(traceparent, tracestate).ok()
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header value; empty when none.
    pub fn tracestate(&self) -> &str {
        &self.tracestate
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The parent (span) id: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }
}

/// `header` (a serialized `tracestate`) cut to at most [`TRACESTATE_MAX`] characters by dropping
/// whole list members: those over [`LONG_MEMBER`] characters first, last first, then from the
/// end; empty when what is left is not printable ASCII. Matches the Python, TypeScript and Go
/// libraries.
fn fit_tracestate(header: &str) -> String {
    let printable = |text: &str| text.bytes().all(|b| (0x20..0x7f).contains(&b));
    let mut header = header.to_string();
    if header.chars().count() > TRACESTATE_MAX {
        let mut members: Vec<&str> = header
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .collect();
        let length = |members: &[&str]| {
            members.iter().map(|m| m.chars().count()).sum::<usize>()
                + members.len().saturating_sub(1)
        };
        while length(&members) > TRACESTATE_MAX {
            let long = members
                .iter()
                .rposition(|m| m.chars().count() > LONG_MEMBER);
            match long {
                Some(at) => members.remove(at),
                None => members.pop().unwrap_or_default(),
            };
        }
        header = members.join(",");
    }
    if printable(&header) {
        header
    } else {
        String::new()
    }
}

/// Whether `value` is a W3C traceparent; what is wrong with it when not.
fn check_traceparent(value: &str) -> Result<(), &'static str> {
    let bytes = value.as_bytes();
    if bytes.len() < 55 {
        return Err("shorter than 55 characters");
    }
    let hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    if !(hex(0..2) && hex(3..35) && hex(36..52) && hex(53..55)) {
        return Err("not lowercase hex digits where they belong");
    }
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return Err("its parts are not joined by '-'");
    }
    match &bytes[0..2] {
        b"ff" => return Err("version ff is invalid"),
        b"00" if bytes.len() != 55 => return Err("version 00 is exactly 55 characters"),
        _ if bytes.len() > 55 && bytes[55] != b'-' => {
            return Err("what follows the flags does not start with '-'");
        }
        // Bytes first: only a value of more bytes than the cap can have more characters.
        _ if bytes.len() > TRACEPARENT_MAX && value.chars().count() > TRACEPARENT_MAX => {
            return Err("a later version is at most 256 characters");
        }
        _ => {}
    }
    if bytes[3..35].iter().all(|&b| b == b'0') {
        return Err("the trace id is all zeros");
    }
    if bytes[36..52].iter().all(|&b| b == b'0') {
        return Err("the parent id is all zeros");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// The checks every producer library shares (`producers/golden/envelopes.json`).
    #[test]
    fn the_golden_traceparent_checks_hold() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../producers/golden/envelopes.json"
        );
        let golden: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let checks = golden["traceparent_checks"].as_array().expect("checks");
        assert!(checks.len() >= 10);
        let mut longest_valid = 0;
        for check in checks {
            let value = check["traceparent"].as_str().unwrap();
            let valid = check["valid"].as_bool().unwrap();
            assert_eq!(TraceContext::new(value, "").is_ok(), valid, "{value:?}");
            if valid {
                longest_valid = longest_valid.max(value.chars().count());
            }
        }
        assert_eq!(
            longest_valid, TRACEPARENT_MAX,
            "the cap's edge is a golden check"
        );
    }

    #[test]
    fn a_later_version_is_at_most_traceparent_max_characters() {
        let later = format!("01{}-", &PARENT[2..]);
        let fill = |length: usize, with: &str| {
            let mut value = later.clone();
            while value.chars().count() < length {
                value.push_str(with);
            }
            value
        };
        let longest = fill(TRACEPARENT_MAX, "x");
        assert_eq!(longest.len(), TRACEPARENT_MAX);
        assert_eq!(check_traceparent(&longest), Ok(()));
        let reason = format!("a later version is at most {TRACEPARENT_MAX} characters");
        assert_eq!(
            check_traceparent(&fill(TRACEPARENT_MAX + 1, "x")),
            Err(&*reason)
        );
        assert_eq!(check_traceparent(&fill(10_000, "x")), Err(&*reason));
        // Characters count, not bytes: 256 of them in 456 bytes.
        let wide = fill(TRACEPARENT_MAX, "é");
        assert!(wide.len() > TRACEPARENT_MAX);
        assert_eq!(check_traceparent(&wide), Ok(()));
        assert_eq!(
            check_traceparent(&fill(TRACEPARENT_MAX + 1, "é")),
            Err(&*reason)
        );
        let error = TraceContext::new(fill(300, "x"), "")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("traceparent \"01-"), "{error}");
        assert!(error.ends_with(&format!("({reason})")), "{error}");
    }

    #[test]
    fn a_spans_long_trace_state_is_cut_by_whole_members_long_ones_first() {
        assert_eq!(fit_tracestate("a=1,b=2"), "a=1,b=2");
        assert_eq!(fit_tracestate(""), "");
        let long = format!("l={}", "x".repeat(200));
        let short: Vec<String> = (0..60).map(|i| format!("k{i:02}=v{i:03}")).collect();
        // 60 members of 8 characters (539 with commas) and one long one in the middle.
        let header = format!(
            "{},{long}, ,{}",
            short[..30].join(","),
            short[30..].join(",")
        );
        let cut = fit_tracestate(&header);
        assert!(!cut.contains("l=x"), "the long member goes first");
        assert!(cut.len() <= TRACESTATE_MAX, "{}", cut.len());
        assert!(cut.starts_with("k00=v000,k01=v001"), "{cut}");
        assert_eq!(
            cut.split(',').count(),
            57,
            "then members from the end: {cut}"
        );
        assert_eq!(
            fit_tracestate(&"x".repeat(600)),
            "",
            "one member over the limit"
        );
        assert_eq!(fit_tracestate("k=v\u{7}"), "", "not printable");
    }

    #[test]
    fn a_record_takes_the_current_span_unless_it_has_a_context() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        use std::time::SystemTime;

        use crate::record::Record;

        let build = || Record::build("r", "T", 1, SystemTime::UNIX_EPOCH, &"b".to_string());
        assert_eq!(
            build().with_current_trace_context().envelope.traceparent,
            ""
        );
        let state = TraceState::from_key_value([("rojo", "00f067aa0ba902b7")]).unwrap();
        let span = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::default(),
            false,
            state,
        );
        let _attached = opentelemetry::Context::current()
            .with_remote_span_context(span)
            .attach();
        let record = build().with_current_trace_context();
        assert_eq!(
            record.envelope.traceparent,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        );
        assert_eq!(record.envelope.tracestate, "rojo=00f067aa0ba902b7");
        let explicit = TraceContext::new(PARENT, "").unwrap();
        let kept = build()
            .with_trace_context(&explicit)
            .with_current_trace_context();
        assert_eq!(
            kept.envelope.traceparent, PARENT,
            "an explicit context wins"
        );
    }

    #[test]
    fn tracestate_is_bounded_printable_ascii_and_errors_name_the_field() {
        let context = TraceContext::new(PARENT, "rojo=00f067aa0ba902b7").unwrap();
        assert_eq!(context.parent_id(), "00f067aa0ba902b7");
        assert_eq!(context.tracestate(), "rojo=00f067aa0ba902b7");
        assert!(TraceContext::new(PARENT, "a".repeat(TRACESTATE_MAX)).is_ok());
        assert_eq!(
            TraceContext::new(PARENT, "a".repeat(TRACESTATE_MAX + 1)),
            Err(InvalidTraceContext::Tracestate)
        );
        assert_eq!(
            TraceContext::new(PARENT, "k=v\n"),
            Err(InvalidTraceContext::Tracestate)
        );
        let error = TraceContext::new(
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(error.starts_with("traceparent \"ff-"), "{error}");
        assert!(error.ends_with("(version ff is invalid)"), "{error}");
    }
}
