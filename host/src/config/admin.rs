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
    /// `listen` was set (in the file or `OUTBOXD_ADMIN_LISTEN`), not taken from the default: a
    /// listener that cannot bind then stops the host. The default address, when taken by another
    /// host on the machine, is skipped with a warning instead.
    pub listen_is_explicit: bool,
    /// How often the row-count gauges and database readiness are refreshed (one counts query
    /// per app code per interval, never one per scrape).
    pub refresh_interval: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAdmin {
    listen: Option<String>,
    #[serde(deserialize_with = "duration")]
    refresh_interval: Duration,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            listen: None,
            refresh_interval: Duration::from_secs(15),
        }
    }
}

impl RawAdmin {
    pub(super) fn validate(self) -> Result<AdminConfig, ConfigError> {
        let listen_is_explicit = self.listen.is_some();
        let text = self.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN);
        let listen = match text.trim() {
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
            listen_is_explicit,
            refresh_interval: self.refresh_interval,
        })
    }
}
