//! The IM plugin's settings, parsed and checked from the sink's `config` table.

use std::time::Duration;

use outboxd_plugin::http::Target;

/// The public API host used when `endpoint` is not set (China region).
pub const DEFAULT_ENDPOINT: &str = "https://console.tim.qq.com";
/// Lifetime of a generated usersig when `usersig_expire_secs` is not set.
const DEFAULT_USERSIG_EXPIRE_SECS: u64 = 86_400;
/// Timeout per batch of requests when `timeout_ms` is not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How an event is shown in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A `TIMCustomElem` group message through `send_group_msg`.
    GroupMessage,
    /// A group system notification through `send_group_system_notification`.
    SystemNotification,
}

impl Mode {
    /// The REST API called in this mode (path after `v4/`).
    pub fn api(self) -> &'static str {
        match self {
            Mode::GroupMessage => "group_open_http_svc/send_group_msg",
            Mode::SystemNotification => "group_open_http_svc/send_group_system_notification",
        }
    }

    /// Words for the log line at `init`.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::GroupMessage => "group messages",
            Mode::SystemNotification => "group system notifications",
        }
    }
}

/// The parsed settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// API base URL without a trailing `/`.
    pub endpoint: String,
    /// The IM application's SDKAppID.
    pub sdkappid: u64,
    /// The app admin account the requests are made as.
    pub identifier: String,
    /// The application's secret key, signing the usersig (never logged).
    pub secret_key: String,
    /// Prepended to an event's room id to name its group.
    pub group_prefix: String,
    /// Message or system notification.
    pub mode: Mode,
    /// Lifetime of each generated usersig, seconds.
    pub usersig_expire_secs: u64,
    /// How long a batch's requests may take.
    pub timeout: Duration,
}

impl Config {
    /// Parses the sink's settings; the error names the bad setting (never the secret key's
    /// value).
    pub fn parse(mut settings: outboxd_plugin::Config) -> Result<Config, String> {
        let endpoint = match settings.optional("endpoint") {
            None => DEFAULT_ENDPOINT.to_string(),
            Some(value) => {
                let trimmed = value.trim_end_matches('/');
                let target =
                    Target::parse(trimmed).map_err(|why| format!("bad `endpoint`: {why}"))?;
                if target.path_with_query.contains('?') {
                    return Err("`endpoint` must not carry a query string".to_string());
                }
                trimmed.to_string()
            }
        };
        let sdkappid = settings
            .positive("sdkappid")?
            .ok_or("the `sdkappid` setting is required")?;
        let identifier = settings.required("identifier")?;
        let secret_key = settings.required("secret_key")?;
        let group_prefix = settings.optional("group_prefix").unwrap_or_default();
        let mode = match settings.choice("mode", &["group_message", "system_notification"])? {
            Some("system_notification") => Mode::SystemNotification,
            _ => Mode::GroupMessage,
        };
        let usersig_expire_secs = settings
            .positive("usersig_expire_secs")?
            .unwrap_or(DEFAULT_USERSIG_EXPIRE_SECS);
        let timeout = settings
            .positive("timeout_ms")?
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        settings.finish()?;
        Ok(Config {
            endpoint,
            sdkappid,
            identifier,
            secret_key,
            group_prefix,
            mode,
            usersig_expire_secs,
            timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> outboxd_plugin::Config {
        outboxd_plugin::Config::from_pairs(items)
    }

    const REQUIRED: [(&str, &str); 3] = [
        ("identifier", "admin"),
        ("sdkappid", "1400000000"),
        ("secret_key", "s3cr3t"),
    ];

    #[test]
    fn defaults() {
        let config = Config::parse(pairs(&REQUIRED)).unwrap();
        assert_eq!(config.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(config.sdkappid, 1_400_000_000);
        assert_eq!(config.identifier, "admin");
        assert_eq!(config.group_prefix, "");
        assert_eq!(config.mode, Mode::GroupMessage);
        assert_eq!(config.usersig_expire_secs, 86_400);
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn every_setting() {
        let mut items = REQUIRED.to_vec();
        items.extend([
            ("endpoint", "http://127.0.0.1:8080/"),
            ("group_prefix", "room_"),
            ("mode", "system_notification"),
            ("timeout_ms", "1500"),
            ("usersig_expire_secs", "600"),
        ]);
        let config = Config::parse(pairs(&items)).unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:8080");
        assert_eq!(config.group_prefix, "room_");
        assert_eq!(config.mode, Mode::SystemNotification);
        assert_eq!(
            config.mode.api(),
            "group_open_http_svc/send_group_system_notification"
        );
        assert_eq!(config.timeout, Duration::from_millis(1500));
        assert_eq!(config.usersig_expire_secs, 600);
    }

    #[test]
    fn rejects_bad_settings_without_echoing_the_key() {
        let bad: &[(&str, &str)] = &[
            ("sdkappid", "abc"),
            ("sdkappid", "0"),
            ("identifier", ""),
            ("secret_key", ""),
            ("mode", "broadcast"),
            ("endpoint", "console.tim.qq.com"),
            ("endpoint", "https://h/?x=1"),
            ("usersig_expire_secs", "-5"),
            ("colour", "blue"),
        ];
        for item in bad {
            let mut items = REQUIRED.to_vec();
            items.retain(|(key, _)| key != &item.0);
            items.push(*item);
            let error = Config::parse(pairs(&items)).unwrap_err();
            assert!(!error.contains("s3cr3t"), "{error}");
        }
        for missing in ["identifier", "sdkappid", "secret_key"] {
            let items: Vec<_> = REQUIRED
                .iter()
                .copied()
                .filter(|(key, _)| *key != missing)
                .collect();
            assert!(Config::parse(pairs(&items)).unwrap_err().contains(missing));
        }
    }
}
