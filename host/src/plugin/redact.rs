//! Keeping a sink's secrets out of logs and `last_error`: every config value whose key looks
//! secret is replaced by `***` in what a plugin says (its error messages, `logging` lines and
//! stdout/stderr) before the host logs or stores it.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// What replaces a secret.
pub const REDACTED: &str = "***";

/// Parts of a config key that mark its value as secret (compared case-insensitively).
const SECRET_KEY_PARTS: &[&str] = &[
    "secret",
    "token",
    "password",
    "passwd",
    "key",
    "credential",
    "auth",
];

/// Shortest value redacted: shorter ones are not real secrets, and replacing them would mangle
/// every message that happens to contain those characters.
const MIN_SECRET_CHARS: usize = 4;

/// The secret values of one sink's config, longest first.
#[derive(Debug)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// Collects the values of `config` whose key looks secret (`secret`, `secret_key`, `token`,
    /// `password`, `api_key`, …): each whole value, each of its space-separated parts (several
    /// secrets during a rotation), and the part after a `whsec_` prefix.
    pub fn new(config: &BTreeMap<String, String>) -> Redactor {
        let mut secrets: Vec<String> = Vec::new();
        for (key, value) in config {
            if !is_secret_key(key) {
                continue;
            }
            let mut candidates = vec![value.trim()];
            for part in value.split_whitespace() {
                candidates.push(part);
                if let Some(rest) = part.strip_prefix("whsec_") {
                    candidates.push(rest);
                }
            }
            secrets.extend(
                candidates
                    .into_iter()
                    .filter(|s| s.chars().count() >= MIN_SECRET_CHARS)
                    .map(str::to_string),
            );
        }
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every secret replaced by [`REDACTED`] (borrowed when nothing matched).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }
}

/// `config` as the console shows it: the value of every key that looks secret replaced by
/// [`REDACTED`], and a password inside a URL value too.
pub fn redacted_config(config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    config
        .iter()
        .map(|(key, value)| {
            let shown = if is_secret_key(key) {
                REDACTED.to_string()
            } else {
                match url::Url::parse(value) {
                    Ok(mut url) if url.password().is_some() => {
                        let _ = url.set_password(Some(REDACTED));
                        url.to_string()
                    }
                    _ => value.clone(),
                }
            };
            (key.clone(), shown)
        })
        .collect()
}

/// Whether a config key names a secret.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEY_PARTS.iter().any(|part| key.contains(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(pairs: &[(&str, &str)]) -> Redactor {
        Redactor::new(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn secret_values_are_replaced_and_others_kept() {
        let r = redactor(&[
            ("secret_key", "s3cr3t-key"),
            ("url", "http://example.com/hook"),
            ("API_TOKEN", "tok-123"),
            ("password", "abc"),
        ]);
        assert_eq!(
            r.redact("sig s3cr3t-key failed at http://example.com/hook with tok-123, abc"),
            "sig *** failed at http://example.com/hook with ***, abc"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_console_sees_secrets_as_stars() {
        let config: BTreeMap<String, String> = [
            ("secret", "whsec_abcdefgh"),
            ("url", "https://user:hunter22@hooks.example.com/x"),
            ("format", "json"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let shown = redacted_config(&config);
        assert_eq!(shown["secret"], "***");
        assert_eq!(shown["url"], "https://user:***@hooks.example.com/x");
        assert_eq!(shown["format"], "json");
    }

    #[test]
    fn rotated_webhook_secrets_are_redacted_one_by_one() {
        let r = redactor(&[("secret", "whsec_b2xkb2xk whsec_bmV3bmV3")]);
        assert_eq!(
            r.redact("old whsec_b2xkb2xk, new key bmV3bmV3"),
            "old ***, new key ***"
        );
    }
}
