//! The envelope decoder: any bytes either fail to decode as an `EventEnvelope` or decode to an
//! envelope that re-encodes (to exactly `encoded_len` bytes) and decodes back to itself.

use outboxd::envelope::EventEnvelope;
use prost::Message;

/// Checks one input: panics when it breaks the property this module describes.
pub fn check(data: &[u8]) {
    let Ok(envelope) = EventEnvelope::decode(data) else {
        return;
    };
    let encoded = envelope.encode_to_vec();
    assert_eq!(encoded.len(), envelope.encoded_len());
    let again = EventEnvelope::decode(encoded.as_slice()).expect("a re-encoded envelope decodes");
    assert_eq!(again, envelope);
    // Canonical: encoding what was decoded from a canonical encoding gives the same bytes.
    assert_eq!(again.encode_to_vec(), encoded);
}
