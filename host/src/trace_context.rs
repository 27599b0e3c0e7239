//! The W3C Trace Context an event carries from its producer (envelope fields `traceparent` and
//! `tracestate`): [`TraceContext`], checked the way every producer library checks it
//! (`producers/SPEC.md`, "Trace context"; `producers/golden/envelopes.json`,
//! `traceparent_checks`).

use thiserror::Error;

/// Longest `tracestate` accepted, in characters (the W3C recommendation: 32 members, 512 bytes).
pub const TRACESTATE_MAX: usize = 512;

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
    /// on after a further `-`), `tracestate` at most [`TRACESTATE_MAX`] characters of
    /// printable ASCII (empty: none).
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
        for check in checks {
            let value = check["traceparent"].as_str().unwrap();
            let valid = check["valid"].as_bool().unwrap();
            assert_eq!(TraceContext::new(value, "").is_ok(), valid, "{value:?}");
        }
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
