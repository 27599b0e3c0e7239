//! The event as the protobuf `outbox.v1.EventEnvelope` (`proto/outbox/v1/envelope.proto`), the
//! bytes a producer wrote into the row: proto3, fields in number order, defaults left out.

use outboxd_plugin::Event;
use outboxd_plugin::trace::TraceContext;

/// `event` encoded as an `EventEnvelope`, with its trace context (fields 8 and 9) when it has one.
pub fn encode(event: &Event, trace: Option<&TraceContext>) -> Vec<u8> {
    let mut out = Vec::with_capacity(event.body.len() + 96);
    bytes_field(&mut out, 1, event.app_code.as_bytes());
    bytes_field(&mut out, 2, event.event_id.as_bytes());
    bytes_field(&mut out, 3, event.room_id.as_bytes());
    bytes_field(&mut out, 4, event.event_type.as_bytes());
    int_field(&mut out, 5, event.room_version);
    int_field(&mut out, 6, event.occurred_at_ms);
    bytes_field(&mut out, 7, &event.body);
    if let Some(trace) = trace {
        bytes_field(&mut out, 8, trace.traceparent.as_bytes());
        bytes_field(&mut out, 9, trace.tracestate.as_bytes());
    }
    out
}

/// A length-delimited field (wire type 2), left out when empty.
fn bytes_field(out: &mut Vec<u8>, number: u64, value: &[u8]) {
    if !value.is_empty() {
        varint(out, number << 3 | 2);
        varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }
}

/// An `int64` field (wire type 0, two's complement as 64 bits), left out when 0.
fn int_field(out: &mut Vec<u8>, number: u64, value: i64) {
    if value != 0 {
        varint(out, number << 3);
        varint(out, value as u64);
    }
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Every case of the producers' golden file encodes to its bytes.
    #[test]
    fn matches_the_golden_envelopes() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../producers/golden/envelopes.json"
        );
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = golden["cases"].as_array().unwrap();
        assert!(cases.len() >= 3);
        for case in cases {
            let e = &case["event"];
            let text = |k: &str| e[k].as_str().unwrap().to_string();
            let event = Event {
                app_code: text("app_code"),
                event_id: text("event_id"),
                event_type: text("event_type"),
                room_id: text("room_id"),
                room_version: text("room_version").parse().unwrap(),
                occurred_at_ms: text("occurred_at_ms").parse().unwrap(),
                body: unhex(&text("body_hex")),
                attempt: 1,
            };
            let trace = TraceContext {
                traceparent: text("traceparent"),
                tracestate: text("tracestate"),
            };
            assert_eq!(
                encode(&event, Some(&trace)),
                unhex(case["envelope_hex"].as_str().unwrap()),
                "case {}",
                case["name"]
            );
        }
    }
}
