//! `[admin]` section: the HTTP listener serving metrics, health and reload, and how often the
//! table gauges behind `/metrics` and `/readyz` are refreshed.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, duration, invalid};

/// Default admin listen address.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// `[admin]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where the admin listener binds; `None` (`listen = ""`) turns it off.
    pub listen: Option<SocketAddr>,
    /// How often the row-count gauges and database readiness are refreshed (one counts query
    /// per app code per interval, never one per scrape).
    pub refresh_interval: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAdmin {
    listen: String,
    #[serde(deserialize_with = "duration")]
    refresh_interval: Duration,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            listen: DEFAULT_ADMIN_LISTEN.into(),
            refresh_interval: Duration::from_secs(15),
        }
    }
}

impl RawAdmin {
    pub(super) fn validate(self) -> Result<AdminConfig, ConfigError> {
        let listen = match self.listen.trim() {
            "" => None,
            text => Some(text.parse::<SocketAddr>().map_err(|e| {
                invalid(
                    "admin.listen",
                    format!("{text:?} is not HOST:PORT with an IP address ({e}); \"\" turns the listener off"),
                )
            })?),
        };
        if self.refresh_interval < Duration::from_millis(100) {
            return Err(invalid("admin.refresh_interval", "must be at least 100ms"));
        }
        Ok(AdminConfig {
            listen,
            refresh_interval: self.refresh_interval,
        })
    }
}
