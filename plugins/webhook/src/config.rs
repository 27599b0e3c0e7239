//! The webhook plugin's settings, parsed and checked from the sink's `config` table.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use outboxd_plugin::http::Target;

/// Timeout per batch of requests when `timeout_ms` is not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How an event becomes the request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A JSON object with every event field, the body base64 (`content-type: application/json`).
    Json,
    /// The event body as-is, sent with the given `content-type`.
    Raw(String),
}

/// The parsed settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where every event is POSTed.
    pub url: String,
    /// Signing keys (decoded from `whsec_<base64>`); one signature per key.
    pub secrets: Vec<Vec<u8>>,
    /// Body format.
    pub content: Content,
    /// How long a batch's requests may take, connect to last body byte.
    pub timeout: Duration,
}

impl Config {
    /// Parses the sink's settings; the error names the bad setting (never a secret's value).
    pub fn parse(mut settings: outboxd_plugin::Config) -> Result<Config, String> {
        let url = settings.required("url")?;
        Target::parse(&url).map_err(|why| format!("bad `url`: {why}"))?;
        let secrets = parse_secrets(&settings.required("secret")?)?;
        let content_type = settings.choice("content_type", &["json", "raw"])?;
        let raw_content_type = settings.optional("raw_content_type");
        let timeout = settings
            .positive("timeout_ms")?
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        settings.finish()?;
        let content = match (content_type, raw_content_type) {
            (Some("raw"), raw) => {
                Content::Raw(raw.unwrap_or_else(|| "application/octet-stream".to_string()))
            }
            (_, Some(_)) => {
                return Err("`raw_content_type` needs `content_type = \"raw\"`".to_string());
            }
            (_, None) => Content::Json,
        };
        Ok(Config {
            url,
            secrets,
            content,
            timeout,
        })
    }
}

/// Decodes space-separated `whsec_<base64>` secrets (the prefix is optional).
fn parse_secrets(value: &str) -> Result<Vec<Vec<u8>>, String> {
    let secrets = value
        .split_whitespace()
        .enumerate()
        .map(|(index, secret)| {
            let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
            match STANDARD.decode(encoded) {
                Ok(bytes) if !bytes.is_empty() => Ok(bytes),
                _ => Err(format!(
                    "secret #{} is not `whsec_` followed by base64",
                    index + 1
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if secrets.is_empty() {
        return Err("`secret` is empty".to_string());
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> outboxd_plugin::Config {
        outboxd_plugin::Config::from_pairs(items)
    }

    #[test]
    fn minimal_config_uses_defaults() {
        let config = Config::parse(pairs(&[
            ("secret", "whsec_c2VjcmV0"),
            ("url", "http://127.0.0.1:9/h"),
        ]))
        .unwrap();
        assert_eq!(config.url, "http://127.0.0.1:9/h");
        assert_eq!(config.secrets, vec![b"secret".to_vec()]);
        assert_eq!(config.content, Content::Json);
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn rotation_raw_and_timeout() {
        let config = Config::parse(pairs(&[
            ("content_type", "raw"),
            ("raw_content_type", "application/x-protobuf"),
            ("secret", "whsec_b2xk  whsec_bmV3"),
            ("timeout_ms", "2500"),
            ("url", "https://example.com/"),
        ]))
        .unwrap();
        assert_eq!(config.secrets, vec![b"old".to_vec(), b"new".to_vec()]);
        assert_eq!(
            config.content,
            Content::Raw("application/x-protobuf".into())
        );
        assert_eq!(config.timeout, Duration::from_millis(2500));
        let raw = Config::parse(pairs(&[
            ("content_type", "raw"),
            ("secret", "c2VjcmV0"),
            ("url", "http://h/"),
        ]))
        .unwrap();
        assert_eq!(raw.content, Content::Raw("application/octet-stream".into()));
    }

    #[test]
    fn rejects_bad_settings_without_echoing_secrets() {
        let cases: &[&[(&str, &str)]] = &[
            &[("secret", "whsec_c2VjcmV0")],
            &[("url", "http://h/")],
            &[("secret", "whsec_not*base64"), ("url", "http://h/")],
            &[("secret", "   "), ("url", "http://h/")],
            &[("secret", "whsec_c2VjcmV0"), ("url", "ftp://h/")],
            &[
                ("content_type", "xml"),
                ("secret", "whsec_c2VjcmV0"),
                ("url", "http://h/"),
            ],
            &[
                ("raw_content_type", "a/b"),
                ("secret", "whsec_c2VjcmV0"),
                ("url", "http://h/"),
            ],
            &[
                ("secret", "whsec_c2VjcmV0"),
                ("timeout_ms", "0"),
                ("url", "http://h/"),
            ],
            &[
                ("secret", "whsec_c2VjcmV0"),
                ("url", "http://h/"),
                ("verbose", "1"),
            ],
        ];
        for case in cases {
            let error = Config::parse(pairs(case)).unwrap_err();
            assert!(!error.contains("not*base64"), "{error}");
        }
    }
}
