//! `[admin]` section: the HTTP listener serving metrics, health, reload and the console, how often
//! the table gauges behind `/metrics` and `/readyz` are refreshed, and the console's tokens.

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
    /// The console's pages and `/api/…` at `/` of the listener (`console = false` turns them off).
    pub console: bool,
    /// The token every console action (requeue, purge, pause, resume, reload) needs; it also
    /// grants reading. `None`: actions are refused.
    pub token: Option<AdminToken>,
    /// A token that grants reading the console only. With it set, reading needs a token from
    /// every address; without it, reading is open from loopback only.
    pub read_token: Option<AdminToken>,
}

/// Shortest token accepted.
pub const MIN_TOKEN_CHARS: usize = 16;

/// A console token: compared in constant time, never printed (`Debug` shows `***`).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

impl AdminToken {
    /// Whether `given` is this token, compared in constant time (`subtle`).
    pub fn matches(&self, given: &str) -> bool {
        subtle::ConstantTimeEq::ct_eq(self.0.as_bytes(), given.as_bytes()).into()
    }

    fn parse(key: &str, text: Option<String>) -> Result<Option<AdminToken>, ConfigError> {
        let Some(text) = text else { return Ok(None) };
        if text.is_empty() {
            return Ok(None);
        }
        if text.chars().count() < MIN_TOKEN_CHARS {
            return Err(invalid(
                key,
                format!(
                    "is {} characters; a token needs at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 24`)",
                    text.chars().count()
                ),
            ));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                key,
                "must not contain spaces or control characters",
            ));
        }
        Ok(Some(AdminToken(text)))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAdmin {
    listen: Option<String>,
    #[serde(deserialize_with = "duration")]
    refresh_interval: Duration,
    console: bool,
    #[serde(deserialize_with = "scalar_text")]
    token: Option<String>,
    #[serde(deserialize_with = "scalar_text")]
    read_token: Option<String>,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            listen: None,
            refresh_interval: Duration::from_secs(15),
            console: true,
            token: None,
            read_token: None,
        }
    }
}

impl std::fmt::Debug for RawAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAdmin")
            .field("listen", &self.listen)
            .field("refresh_interval", &self.refresh_interval)
            .field("console", &self.console)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("read_token", &self.read_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A token as text, whatever scalar TOML (or an environment value read as TOML: digits are an
/// integer) made of it.
fn scalar_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = toml::Value::deserialize(d)?;
    match value {
        toml::Value::String(s) => Ok(Some(s)),
        toml::Value::Integer(i) => Ok(Some(i.to_string())),
        toml::Value::Float(f) => Ok(Some(f.to_string())),
        toml::Value::Boolean(b) => Ok(Some(b.to_string())),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, found {}",
            other.type_str()
        ))),
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
        let token = AdminToken::parse("admin.token", self.token)?;
        let read_token = AdminToken::parse("admin.read_token", self.read_token)?;
        if token.is_some() && token == read_token {
            return Err(invalid(
                "admin.read_token",
                "is the same as admin.token: give readers a token of their own (or leave it out)",
            ));
        }
        Ok(AdminConfig {
            listen,
            listen_is_explicit,
            refresh_interval: self.refresh_interval,
            console: self.console,
            token,
            read_token,
        })
    }
}
