//! The IM plugin's settings, parsed and checked from the sink's `config` table.

use std::time::Duration;

use http_util::Target;

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
    /// Parses the `(key, value)` pairs given to `init`; the error names the bad setting (never
    /// the secret key's value).
    pub fn parse(pairs: &[(String, String)]) -> Result<Config, String> {
        let mut endpoint = DEFAULT_ENDPOINT.to_string();
        let mut sdkappid = None;
        let mut identifier = None;
        let mut secret_key = None;
        let mut group_prefix = String::new();
        let mut mode = Mode::GroupMessage;
        let mut usersig_expire_secs = DEFAULT_USERSIG_EXPIRE_SECS;
        let mut timeout = DEFAULT_TIMEOUT;
        for (key, value) in pairs {
            match key.as_str() {
                "endpoint" => {
                    let trimmed = value.trim_end_matches('/');
                    let target = Target::parse(trimmed)
                        .map_err(|why| format!("im plugin: bad `endpoint`: {why}"))?;
                    if target.path_with_query.contains('?') {
                        return Err(
                            "im plugin: `endpoint` must not carry a query string".to_string()
                        );
                    }
                    endpoint = trimmed.to_string();
                }
                "sdkappid" => sdkappid = Some(positive(key, value)?),
                "identifier" if !value.is_empty() => identifier = Some(value.clone()),
                "secret_key" if !value.is_empty() => secret_key = Some(value.clone()),
                "identifier" | "secret_key" => {
                    return Err(format!("im plugin: `{key}` must not be empty"));
                }
                "group_prefix" => group_prefix = value.clone(),
                "mode" => {
                    mode = match value.as_str() {
                        "group_message" => Mode::GroupMessage,
                        "system_notification" => Mode::SystemNotification,
                        other => {
                            return Err(format!(
                                "im plugin: unknown mode `{other}`: use `group_message` or `system_notification`"
                            ));
                        }
                    }
                }
                "usersig_expire_secs" => usersig_expire_secs = positive(key, value)?,
                "timeout_ms" => timeout = Duration::from_millis(positive(key, value)?),
                other => {
                    return Err(format!(
                        "im plugin: unknown setting `{other}`: the settings are endpoint, sdkappid, identifier, secret_key, group_prefix, mode, usersig_expire_secs, timeout_ms"
                    ));
                }
            }
        }
        Ok(Config {
            endpoint,
            sdkappid: sdkappid.ok_or("im plugin: the `sdkappid` setting is required")?,
            identifier: identifier.ok_or("im plugin: the `identifier` setting is required")?,
            secret_key: secret_key.ok_or("im plugin: the `secret_key` setting is required")?,
            group_prefix,
            mode,
            usersig_expire_secs,
            timeout,
        })
    }
}

/// `value` as a positive integer, or an error naming setting `key`.
fn positive(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .ok()
        .filter(|&n: &u64| n > 0)
        .ok_or_else(|| format!("im plugin: `{key}` must be a positive integer, not `{value}`"))
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

    const REQUIRED: [(&str, &str); 3] = [
        ("identifier", "admin"),
        ("sdkappid", "1400000000"),
        ("secret_key", "s3cr3t"),
    ];

    #[test]
    fn defaults() {
        let config = Config::parse(&pairs(&REQUIRED)).unwrap();
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
        let config = Config::parse(&pairs(&items)).unwrap();
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
            let error = Config::parse(&pairs(&items)).unwrap_err();
            assert!(!error.contains("s3cr3t"), "{error}");
        }
        for missing in ["identifier", "sdkappid", "secret_key"] {
            let items: Vec<_> = REQUIRED
                .iter()
                .copied()
                .filter(|(key, _)| *key != missing)
                .collect();
            assert!(Config::parse(&pairs(&items)).unwrap_err().contains(missing));
        }
    }
}
