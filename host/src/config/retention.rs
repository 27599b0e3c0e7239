//! `[retention]` section: how long finished rows are kept, and how fast the cleanup may delete.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::{ConfigError, duration, invalid};

/// `[retention]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Age after which `delivered` rows are deleted; `None` (`"off"`) keeps them. Default 7d.
    pub delivered: Option<Duration>,
    /// Age after which `failed` rows are deleted; `None` (`"off"`) keeps them. Default 30d.
    pub failed: Option<Duration>,
    /// Rows deleted per statement. Default 1000.
    pub batch_size: u32,
    /// Wait between two batches while there is more to delete (bounds the delete rate to
    /// `batch_size` rows per pause). Default 100ms.
    pub pause: Duration,
    /// Wait between two cleanup rounds once caught up. Default 1m.
    pub interval: Duration,
}

impl RetentionConfig {
    /// Whether the cleanup has anything to do.
    pub fn enabled(&self) -> bool {
        self.delivered.is_some() || self.failed.is_some()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetention {
    #[serde(deserialize_with = "age")]
    delivered: Option<Duration>,
    #[serde(deserialize_with = "age")]
    failed: Option<Duration>,
    batch_size: u32,
    #[serde(deserialize_with = "duration")]
    pause: Duration,
    #[serde(deserialize_with = "duration")]
    interval: Duration,
}

impl Default for RawRetention {
    fn default() -> Self {
        RawRetention {
            delivered: Some(Duration::from_secs(7 * 24 * 3600)),
            failed: Some(Duration::from_secs(30 * 24 * 3600)),
            batch_size: 1000,
            pause: Duration::from_millis(100),
            interval: Duration::from_secs(60),
        }
    }
}

/// `"off"` or a humantime duration (`"7d"`, `"12h"`).
fn age<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    humantime::parse_duration(text.trim())
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{text:?}: {e} (or \"off\")")))
}

impl RawRetention {
    pub(super) fn validate(self) -> Result<RetentionConfig, ConfigError> {
        for (key, age) in [
            ("retention.delivered", self.delivered),
            ("retention.failed", self.failed),
        ] {
            if age.is_some_and(|age| age < Duration::from_secs(60)) {
                return Err(invalid(key, "must be at least 1m (or \"off\")"));
            }
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err(invalid(
                "retention.batch_size",
                format!("must be 1..=10000, got {}", self.batch_size),
            ));
        }
        if self.interval.is_zero() {
            return Err(invalid("retention.interval", "must be greater than 0"));
        }
        Ok(RetentionConfig {
            delivered: self.delivered,
            failed: self.failed,
            batch_size: self.batch_size,
            pause: self.pause,
            interval: self.interval,
        })
    }
}
