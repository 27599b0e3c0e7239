//! The webhook plugin's settings, parsed and checked from the sink's `config` table.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http_util::Target;

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
    /// Parses the `(key, value)` pairs given to `init`; the error names the bad setting (never
    /// a secret's value).
    pub fn parse(pairs: &[(String, String)]) -> Result<Config, String> {
        let mut url = None;
        let mut secrets = None;
        let mut content_type = "json";
        let mut raw_content_type = None;
        let mut timeout = DEFAULT_TIMEOUT;
        for (key, value) in pairs {
            match key.as_str() {
                "url" => {
                    Target::parse(value)
                        .map_err(|why| format!("webhook plugin: bad `url`: {why}"))?;
                    url = Some(value.clone());
                }
                "secret" => secrets = Some(parse_secrets(value)?),
                "content_type" => content_type = value.as_str(),
                "raw_content_type" => raw_content_type = Some(value.clone()),
                "timeout_ms" => {
                    let ms: u64 = value.parse().ok().filter(|&ms| ms > 0).ok_or_else(|| {
                        format!(
                            "webhook plugin: `timeout_ms` must be a positive integer, not `{value}`"
                        )
                    })?;
                    timeout = Duration::from_millis(ms);
                }
                other => {
                    return Err(format!(
                        "webhook plugin: unknown setting `{other}`: the settings are url, secret, content_type, raw_content_type, timeout_ms"
                    ));
                }
            }
        }
        let content = match content_type {
            "json" if raw_content_type.is_some() => {
                return Err(
                    "webhook plugin: `raw_content_type` needs `content_type = \"raw\"`".to_string(),
                );
            }
            "json" => Content::Json,
            "raw" => Content::Raw(
                raw_content_type.unwrap_or_else(|| "application/octet-stream".to_string()),
            ),
            other => {
                return Err(format!(
                    "webhook plugin: unknown content_type `{other}`: use `json` or `raw`"
                ));
            }
        };
        Ok(Config {
            url: url.ok_or("webhook plugin: the `url` setting is required")?,
            secrets: secrets
                .ok_or("webhook plugin: the `secret` setting is required (whsec_<base64>)")?,
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
                    "webhook plugin: secret #{} is not `whsec_` followed by base64",
                    index + 1
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if secrets.is_empty() {
        return Err("webhook plugin: `secret` is empty".to_string());
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn minimal_config_uses_defaults() {
        let config = Config::parse(&pairs(&[
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
        let config = Config::parse(&pairs(&[
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
        let raw = Config::parse(&pairs(&[
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
            let error = Config::parse(&pairs(case)).unwrap_err();
            assert!(!error.contains("not*base64"), "{error}");
        }
    }
}
