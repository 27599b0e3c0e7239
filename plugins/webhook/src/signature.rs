//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{payload}")>`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// One `v1,<base64>` signature of `payload` for message `id` at `timestamp` (unix seconds).
pub fn sign(secret: &[u8], id: &str, timestamp: u64, payload: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header value: one signature per secret, space-separated.
pub fn signature_header(secrets: &[Vec<u8>], id: &str, timestamp: u64, payload: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| sign(secret, id, timestamp, payload))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        // The example from the Standard Webhooks specification and its reference libraries.
        let secret = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let payload = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, payload),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn one_signature_per_secret() {
        let header = signature_header(&[b"a".to_vec(), b"b".to_vec()], "id", 1, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(
            parts,
            vec![sign(b"a", "id", 1, b"{}"), sign(b"b", "id", 1, b"{}")]
        );
        assert_ne!(parts[0], parts[1]);
    }
}
