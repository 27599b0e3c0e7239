//! The admin `usersig`, made with Tencent's TLSSigAPIv2 algorithm and cached until near expiry.
//!
//! `TLS.sig` = base64(HMAC-SHA256(secret_key, "TLS.identifier:{id}\nTLS.sdkappid:{app}\n
//! TLS.time:{now}\nTLS.expire:{secs}\n")); the usersig is the JSON document `{"TLS.ver": "2.0",
//! "TLS.identifier", "TLS.sdkappid", "TLS.time", "TLS.expire", "TLS.sig"}`, zlib-compressed, then
//! base64 with `+` → `*`, `/` → `-`, `=` → `_`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;

/// zlib compression level (the reference implementations use zlib's default).
const ZLIB_LEVEL: u8 = 6;

/// A generated usersig with the time it was made.
#[derive(Clone, Debug)]
pub struct CachedSig {
    /// The usersig itself.
    pub sig: String,
    /// Unix seconds it was generated at (its `TLS.time`).
    pub time: u64,
    /// Its lifetime, seconds (its `TLS.expire`).
    pub expire: u64,
}

impl CachedSig {
    /// Whether it can still be used at `now`: more than 10% of its lifetime is left (and the
    /// clock did not go backwards past its making).
    pub fn fresh_at(&self, now: u64) -> bool {
        let expires_at = self.time.saturating_add(self.expire);
        now >= self.time && expires_at.saturating_sub(now) * 10 > self.expire
    }
}

/// Generates a usersig for `identifier` in app `sdkappid`, made at `time`, valid `expire` seconds.
pub fn generate(
    sdkappid: u64,
    identifier: &str,
    secret_key: &str,
    time: u64,
    expire: u64,
) -> String {
    let content = format!(
        "TLS.identifier:{identifier}\nTLS.sdkappid:{sdkappid}\nTLS.time:{time}\nTLS.expire:{expire}\n"
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(secret_key.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(content.as_bytes());
    let document = json!({
        "TLS.ver": "2.0",
        "TLS.identifier": identifier,
        "TLS.sdkappid": sdkappid,
        "TLS.expire": expire,
        "TLS.time": time,
        "TLS.sig": STANDARD.encode(mac.finalize().into_bytes()),
    });
    let compressed =
        miniz_oxide::deflate::compress_to_vec_zlib(document.to_string().as_bytes(), ZLIB_LEVEL);
    STANDARD
        .encode(compressed)
        .chars()
        .map(|c| match c {
            '+' => '*',
            '/' => '-',
            '=' => '_',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a usersig back into its JSON document (the inverse of [`generate`]'s encoding).
    fn decode(sig: &str) -> serde_json::Value {
        let base64: String = sig
            .chars()
            .map(|c| match c {
                '*' => '+',
                '-' => '/',
                '_' => '=',
                c => c,
            })
            .collect();
        let compressed = STANDARD.decode(base64).unwrap();
        let json = miniz_oxide::inflate::decompress_to_vec_zlib(&compressed).unwrap();
        serde_json::from_slice(&json).unwrap()
    }

    #[test]
    fn document_round_trips_and_signature_verifies() {
        let sig = generate(1_400_000_000, "admin", "key", 1_700_000_000, 86_400);
        assert!(
            sig.chars()
                .all(|c| c.is_ascii_alphanumeric() || "*-_".contains(c)),
            "{sig}"
        );
        let doc = decode(&sig);
        assert_eq!(doc["TLS.ver"], "2.0");
        assert_eq!(doc["TLS.identifier"], "admin");
        assert_eq!(doc["TLS.sdkappid"], 1_400_000_000u64);
        assert_eq!(doc["TLS.time"], 1_700_000_000u64);
        assert_eq!(doc["TLS.expire"], 86_400);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"key").unwrap();
        mac.update(b"TLS.identifier:admin\nTLS.sdkappid:1400000000\nTLS.time:1700000000\nTLS.expire:86400\n");
        assert_eq!(doc["TLS.sig"], STANDARD.encode(mac.finalize().into_bytes()));
    }

    #[test]
    fn signature_depends_on_the_key() {
        let a = decode(&generate(1, "admin", "key-a", 10, 100));
        let b = decode(&generate(1, "admin", "key-b", 10, 100));
        assert_ne!(a["TLS.sig"], b["TLS.sig"]);
    }

    #[test]
    fn freshness_leaves_a_ten_percent_margin() {
        let cached = CachedSig {
            sig: String::new(),
            time: 1000,
            expire: 100,
        };
        assert!(cached.fresh_at(1000));
        assert!(cached.fresh_at(1089));
        assert!(!cached.fresh_at(1090));
        assert!(!cached.fresh_at(1200));
        assert!(
            !cached.fresh_at(999),
            "a clock that went backwards regenerates"
        );
    }
}
