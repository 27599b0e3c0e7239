//! The protobuf `EventEnvelope` (`proto/outbox/v1/envelope.proto`), compiled by prost at build time.
//!
//! Producers in other languages serialize the same message from the `.proto` file; this module is
//! the Rust side of that contract.

#![allow(missing_docs)] // generated code; the .proto file carries the field documentation

include!(concat!(env!("OUT_DIR"), "/outbox.v1.rs"));

#[cfg(test)]
mod golden {
    //! The cross-language contract: `producers/golden/envelopes.json` (written by an independent
    //! encoder, `producers/golden/generate.py`) holds the bytes every producer library must write;
    //! the host's prost encoding must be the same bytes, and must decode them back.

    use prost::Message;
    use serde_json::Value;

    use super::EventEnvelope;
    use crate::record::new_event_id;

    fn golden() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../producers/golden/envelopes.json"
        );
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn field<'a>(event: &'a Value, name: &str) -> &'a str {
        event[name]
            .as_str()
            .unwrap_or_else(|| panic!("{name} is not a string"))
    }

    #[test]
    fn the_host_encodes_every_golden_envelope_byte_for_byte() {
        let golden = golden();
        let cases = golden["cases"].as_array().expect("cases");
        assert!(cases.len() >= 8, "too few golden cases: {}", cases.len());
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let event = &case["event"];
            let envelope = EventEnvelope {
                app_code: field(event, "app_code").into(),
                event_id: field(event, "event_id").into(),
                room_id: field(event, "room_id").into(),
                event_type: field(event, "event_type").into(),
                room_version: field(event, "room_version").parse().unwrap(),
                occurred_at_ms: field(event, "occurred_at_ms").parse().unwrap(),
                body: unhex(field(event, "body_hex")),
                traceparent: field(event, "traceparent").into(),
                tracestate: field(event, "tracestate").into(),
            };
            let expected = unhex(case["envelope_hex"].as_str().unwrap());
            assert_eq!(envelope.encode_to_vec(), expected, "case {name}");
            assert_eq!(
                EventEnvelope::decode(&expected[..]).unwrap(),
                envelope,
                "case {name}"
            );
        }
    }

    #[test]
    fn new_event_ids_start_with_the_golden_prefixes() {
        let golden = golden();
        for example in golden["event_id_prefixes"]
            .as_array()
            .expect("event_id_prefixes")
        {
            let ms: i64 = example["ms"].as_str().unwrap().parse().unwrap();
            let id = new_event_id(ms);
            assert!(
                id.starts_with(example["prefix"].as_str().unwrap()),
                "{id} for {ms}"
            );
            assert_eq!(id.len(), 4 + 13 + 16);
            assert!(
                id[4..]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
        }
    }
}
