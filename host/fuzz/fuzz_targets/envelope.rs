//! The envelope decoder: any bytes either fail to decode as an `EventEnvelope` or decode to an
//! envelope that re-encodes (to exactly `encoded_len` bytes) and decodes back to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use outboxd::envelope::EventEnvelope;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(envelope) = EventEnvelope::decode(data) else {
        return;
    };
    let encoded = envelope.encode_to_vec();
    assert_eq!(encoded.len(), envelope.encoded_len());
    let again = EventEnvelope::decode(encoded.as_slice()).expect("a re-encoded envelope decodes");
    assert_eq!(again, envelope);
    // Canonical: encoding what was decoded from a canonical encoding gives the same bytes.
    assert_eq!(again.encode_to_vec(), encoded);
});
