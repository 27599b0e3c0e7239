//! `[[broker]]` sections: the message-broker connections outboxd opens for sinks (NATS JetStream,
//! RabbitMQ, Redis Streams, MQTT, Kafka), with their credentials, TLS and limits.
//!
//! [`BrokerConfig`] is the section as written; [`BrokerSpec`] is what `check_brokers` makes of
//! it, once, at load: a unique name, a URL of the kind's scheme without a password in it, the
//! password read from the environment or a file (never from the config file itself), a CA file
//! that reads, limits a connection can run with. The broker module (`crate::broker`) takes specs
//! as given.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{ByteSize, ConfigError, SinkSpec, invalid};

/// The kind of broker a connection speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrokerKind {
    /// NATS with JetStream (`nats://`, `tls://`): publishes acknowledged by a PubAck.
    Nats,
    /// RabbitMQ / AMQP 0-9-1 (`amqp://`, `amqps://`): persistent messages, publisher confirms.
    Rabbitmq,
    /// Redis Streams (`redis://`, `rediss://`): one `XADD` per message.
    Redis,
    /// MQTT 5 (`mqtt://`, `mqtts://`): QoS 1, acknowledged by a PUBACK.
    Mqtt,
    /// Kafka (`kafka://`, `kafka+tls://`): `acks=all` produce requests.
    Kafka,
}

impl BrokerKind {
    /// The name as written in config (`nats`, `rabbitmq`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerKind::Nats => "nats",
            BrokerKind::Rabbitmq => "rabbitmq",
            BrokerKind::Redis => "redis",
            BrokerKind::Mqtt => "mqtt",
            BrokerKind::Kafka => "kafka",
        }
    }

    /// The URL schemes of this kind: (plain, TLS).
    pub fn schemes(self) -> (&'static str, &'static str) {
        match self {
            BrokerKind::Nats => ("nats", "tls"),
            BrokerKind::Rabbitmq => ("amqp", "amqps"),
            BrokerKind::Redis => ("redis", "rediss"),
            BrokerKind::Mqtt => ("mqtt", "mqtts"),
            BrokerKind::Kafka => ("kafka", "kafka+tls"),
        }
    }
}

impl fmt::Display for BrokerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[broker]]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    /// Name sinks and plugins use for the connection (`limits.allow_brokers`).
    pub name: String,
    /// `nats`, `rabbitmq`, `redis`, `mqtt` or `kafka`.
    pub kind: BrokerKind,
    /// Where it is, e.g. `nats://127.0.0.1:4222`; the TLS scheme (`tls://`, `amqps://`,
    /// `rediss://`, `mqtts://`, `kafka+tls://`) turns TLS on. No password in it.
    pub url: String,
    /// User name, when the broker wants one.
    #[serde(default)]
    pub username: Option<String>,
    /// The environment variable holding the password (NATS: the token, when no `username`).
    #[serde(default)]
    pub password_env: Option<String>,
    /// A file holding the password (one line; the trailing newline is dropped).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// TLS settings.
    #[serde(default)]
    pub tls: BrokerTls,
    /// RabbitMQ only: the exchange messages are published to (default `""`, the default
    /// exchange, where the topic names the queue).
    #[serde(default)]
    pub exchange: Option<String>,
    /// MQTT only: the client id (default `outboxd-<name>-<random>`).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Limits of the connection.
    #[serde(default)]
    pub limits: BrokerLimits,
}

/// `tls = { … }` of a `[[broker]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerTls {
    /// PEM file of the certificate authorities to trust instead of the built-in web roots (a
    /// private CA); implies TLS.
    pub ca_file: Option<PathBuf>,
}

/// `limits = { … }` of a `[[broker]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerLimits {
    /// Longest wait for a connection (TCP, TLS and the broker's handshake). Default 5s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Most messages awaiting the broker's confirmation at once, over every sink using the
    /// connection; more wait their turn. Default 4096.
    pub max_in_flight: u32,
    /// Largest message (payload, key and headers); a larger one fails permanently, alone.
    /// Default 1MiB (NATS's and MQTT brokers' usual cap).
    pub max_message_size: ByteSize,
}

impl Default for BrokerLimits {
    fn default() -> Self {
        BrokerLimits {
            connect_timeout: Duration::from_secs(5),
            max_in_flight: 4096,
            max_message_size: ByteSize(1 << 20),
        }
    }
}

/// A secret read from the environment or a file; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret's text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// A `[[broker]]` checked by `check_brokers` (at config load).
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerSpec {
    name: String,
    kind: BrokerKind,
    url: url::Url,
    tls: bool,
    username: Option<String>,
    password: Option<Secret>,
    ca_pem: Option<Vec<u8>>,
    exchange: String,
    client_id: Option<String>,
    limits: BrokerLimits,
}

impl BrokerSpec {
    /// Checks one section outside a configuration (tests, benchmarks): errors keyed `broker.…`,
    /// `ca_file` as given.
    pub fn new(broker: BrokerConfig) -> Result<BrokerSpec, ConfigError> {
        BrokerSpec::check(broker, "broker", Path::new(""), &|name| {
            std::env::var(name).ok()
        })
    }

    /// Checks one section; `key` names it in errors (`broker[1]`), `env` reads variables.
    fn check(
        broker: BrokerConfig,
        key: &str,
        base_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<BrokerSpec, ConfigError> {
        let name = broker.name.trim();
        if name.is_empty() || name.len() > 64 || name.contains(char::is_whitespace) {
            return Err(invalid(
                &format!("{key}.name"),
                "must be 1–64 bytes without spaces",
            ));
        }
        let kind = broker.kind;
        let url_key = format!("{key}.url");
        let url = url::Url::parse(&broker.url)
            .map_err(|e| invalid(&url_key, format!("{:?} is not a URL: {e}", broker.url)))?;
        let (plain, secure) = kind.schemes();
        let tls = match url.scheme() {
            scheme if scheme == plain => false,
            scheme if scheme == secure => true,
            other => {
                return Err(invalid(
                    &url_key,
                    format!("a {kind} connection takes {plain}:// or {secure}://, not {other}://"),
                ));
            }
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid(&url_key, "names no host"));
        }
        if url.password().is_some() {
            return Err(invalid(
                &url_key,
                format!(
                    "carries a password: put it in {key}.password_env (an environment variable) \
                     or {key}.password_file"
                ),
            ));
        }
        if !url.username().is_empty() {
            return Err(invalid(
                &url_key,
                format!("carries a user name: write it as {key}.username"),
            ));
        }
        let password = match (&broker.password_env, &broker.password_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    &format!("{key}.password_file"),
                    format!("give {key}.password_env or {key}.password_file, not both"),
                ));
            }
            (Some(var), None) => {
                let value = env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
                    invalid(
                        &format!("{key}.password_env"),
                        format!("the environment variable {var} is not set (or empty)"),
                    )
                })?;
                Some(Secret(value))
            }
            (None, Some(file)) => {
                let path = base_dir.join(file);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    invalid(
                        &format!("{key}.password_file"),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                let text = text.trim_end_matches(['\n', '\r']).to_string();
                if text.is_empty() {
                    return Err(invalid(
                        &format!("{key}.password_file"),
                        format!("{} is empty", path.display()),
                    ));
                }
                Some(Secret(text))
            }
            (None, None) => None,
        };
        if broker.username.as_deref().is_some_and(str::is_empty) {
            return Err(invalid(&format!("{key}.username"), "must not be empty"));
        }
        let ca_pem = match &broker.tls.ca_file {
            Some(file) => {
                let path = base_dir.join(file);
                let pem = std::fs::read(&path).map_err(|e| {
                    invalid(
                        &format!("{key}.tls.ca_file"),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(invalid(
                        &format!("{key}.tls.ca_file"),
                        format!("{} holds no PEM certificate", path.display()),
                    ));
                }
                Some(pem)
            }
            None => None,
        };
        if ca_pem.is_some() && !tls {
            return Err(invalid(
                &format!("{key}.tls.ca_file"),
                format!("is set but {url_key} uses {plain}://; use {secure}://"),
            ));
        }
        let only = |field: &str, value: bool, wanted: BrokerKind| {
            if value && kind != wanted {
                Err(invalid(
                    &format!("{key}.{field}"),
                    format!("applies to {wanted} connections only, not {kind}"),
                ))
            } else {
                Ok(())
            }
        };
        only("exchange", broker.exchange.is_some(), BrokerKind::Rabbitmq)?;
        only("client_id", broker.client_id.is_some(), BrokerKind::Mqtt)?;
        let limits = broker.limits;
        if limits.connect_timeout.is_zero() {
            return Err(invalid(
                &format!("{key}.limits.connect_timeout"),
                "must be greater than 0",
            ));
        }
        if !(1..=1_000_000).contains(&limits.max_in_flight) {
            return Err(invalid(
                &format!("{key}.limits.max_in_flight"),
                format!("must be 1..=1000000, got {}", limits.max_in_flight),
            ));
        }
        if !(1024..=(256 << 20)).contains(&limits.max_message_size.0) {
            return Err(invalid(
                &format!("{key}.limits.max_message_size"),
                "must be between 1KiB and 256MiB",
            ));
        }
        Ok(BrokerSpec {
            name: name.to_string(),
            kind,
            url,
            tls,
            username: broker.username,
            password,
            ca_pem,
            exchange: broker.exchange.unwrap_or_default(),
            client_id: broker.client_id,
            limits,
        })
    }

    /// The connection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it speaks to.
    pub fn kind(&self) -> BrokerKind {
        self.kind
    }

    /// The URL as written (no credentials in it).
    pub fn url(&self) -> &url::Url {
        &self.url
    }

    /// Whether the connection uses TLS (the kind's TLS scheme).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The user name, if any.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// The password (or NATS token), if any.
    pub fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    /// PEM certificates of the CAs to trust (`tls.ca_file`), if set.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }

    /// RabbitMQ: the exchange (`""`: the default exchange).
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// MQTT: the client id, if set.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    /// The connection's limits.
    pub fn limits(&self) -> &BrokerLimits {
        &self.limits
    }
}

/// Checks every `[[broker]]` (unique names; errors keyed `broker[i].…`) and that every sink's
/// `limits.allow_brokers` names one of them (errors keyed `sink[i].limits.allow_brokers`).
pub(super) fn check_brokers(
    brokers: Vec<BrokerConfig>,
    sinks: &[SinkSpec],
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<BrokerSpec>, ConfigError> {
    let mut names = BTreeSet::new();
    let mut specs = Vec::with_capacity(brokers.len());
    for (index, broker) in brokers.into_iter().enumerate() {
        let key = format!("broker[{index}]");
        let spec = BrokerSpec::check(broker, &key, base_dir, env)?;
        if !names.insert(spec.name.clone()) {
            return Err(invalid(
                &format!("{key}.name"),
                format!("broker `{}` is defined twice", spec.name),
            ));
        }
        specs.push(spec);
    }
    for (index, sink) in sinks.iter().enumerate() {
        if let Some(unknown) = sink
            .limits()
            .allow_brokers
            .iter()
            .find(|name| !names.contains(name.as_str()))
        {
            let known = if names.is_empty() {
                "no [[broker]] is configured".to_string()
            } else {
                format!(
                    "the [[broker]] names are {}",
                    names.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            };
            return Err(invalid(
                &format!("sink[{index}].limits.allow_brokers"),
                format!("unknown broker `{unknown}` ({known})"),
            ));
        }
    }
    Ok(specs)
}
