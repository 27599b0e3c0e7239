//! `outboxd plugin test`: a plugin's `init`, then one `publish` of sample events, without a
//! database; one line per event with its outcome. A plugin that imports the `broker` interface
//! publishes on a stand-in broker (`--broker`, `--broker-kind`, `--broker-answer`), and the
//! messages it received are printed before the outcomes ([`super::stand_in_report`]). Only such
//! a plugin gets the stand-in: the plugin's imports are read first (from the artifact cache,
//! which the test run then reuses).

use std::path::Path;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use super::stand_in_report::StandInReport;
use outboxd::broker::{Brokers, StandInAnswer, StandInBroker};
use outboxd::config::{BrokerKind, PluginSettings};
use outboxd::plugin::TestReport;
use outboxd::publish::Event;

/// The stand-in broker of `outboxd plugin test`, for a plugin that imports the `broker`
/// interface.
#[derive(Debug, Args)]
pub struct StandInArgs {
    /// The `[[broker]]` connection the stand-in broker is: the name the plugin publishes on (for
    /// the `broker` plugin, its `connection` setting).
    #[arg(long = "broker", value_name = "NAME", default_value = "events")]
    pub name: String,
    /// The kind of broker the stand-in answers as (its refusal is that kind's).
    #[arg(long = "broker-kind", value_enum, default_value_t = BrokerKindFlag::Nats)]
    pub kind: BrokerKindFlag,
    /// How the stand-in broker answers each message.
    #[arg(long = "broker-answer", value_enum, default_value_t = BrokerAnswerFlag::Confirmed)]
    pub answer: BrokerAnswerFlag,
}

/// `--broker-kind`: a `[[broker]]` kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BrokerKindFlag {
    /// NATS JetStream: refuses with "no stream found for given subject" (retryable).
    Nats,
    /// RabbitMQ: refuses with a nack (retryable).
    Rabbitmq,
    /// Redis Streams: refuses with a `WRONGTYPE` error (permanent).
    Redis,
    /// MQTT 5: refuses with a `NotAuthorized` PUBACK (permanent).
    Mqtt,
    /// Kafka: refuses with `TopicAuthorizationFailed` (permanent).
    Kafka,
}

impl From<BrokerKindFlag> for BrokerKind {
    fn from(flag: BrokerKindFlag) -> BrokerKind {
        match flag {
            BrokerKindFlag::Nats => BrokerKind::Nats,
            BrokerKindFlag::Rabbitmq => BrokerKind::Rabbitmq,
            BrokerKindFlag::Redis => BrokerKind::Redis,
            BrokerKindFlag::Mqtt => BrokerKind::Mqtt,
            BrokerKindFlag::Kafka => BrokerKind::Kafka,
        }
    }
}

/// `--broker-answer`: how the stand-in broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BrokerAnswerFlag {
    /// Confirms each message.
    Confirmed,
    /// Refuses each message as the `--broker-kind` broker does.
    Refused,
    /// Cannot be reached: no message arrives, each is retryable.
    Down,
}

impl From<BrokerAnswerFlag> for StandInAnswer {
    fn from(flag: BrokerAnswerFlag) -> StandInAnswer {
        match flag {
            BrokerAnswerFlag::Confirmed => StandInAnswer::Confirmed,
            BrokerAnswerFlag::Refused => StandInAnswer::Refused,
            BrokerAnswerFlag::Down => StandInAnswer::Down,
        }
    }
}

/// What `outboxd plugin test` runs, its arguments parsed.
pub struct PluginTestOptions<'a> {
    /// The `.wasm` component.
    pub file: &'a Path,
    /// The settings passed to `init`.
    pub config: Vec<(String, String)>,
    /// The sample events, published in one call.
    pub events: Vec<Event>,
    /// The origins the plugin may make HTTP requests to.
    pub allow_hosts: Vec<String>,
    /// The stand-in broker's flags.
    pub stand_in: &'a StandInArgs,
}

/// Runs the plugin on the sample events and prints what the stand-in broker received (for a
/// plugin that imports the `broker` interface), then each event's outcome. The stand-in is
/// started only for such a plugin, so no other plugin's test logs a broker connection.
pub async fn run(options: PluginTestOptions<'_>, settings: &PluginSettings) -> Result<()> {
    let world = outboxd::plugin::check(options.file, settings).await?.world;
    let stand_in = options.stand_in;
    let broker = if world.imports_broker() {
        let broker =
            StandInBroker::start(&stand_in.name, stand_in.kind.into(), stand_in.answer.into())
                .with_context(|| format!("--broker {:?}", stand_in.name))?;
        Some(broker)
    } else {
        None
    };
    let brokers = broker
        .as_ref()
        .map_or_else(Brokers::none, |broker| broker.brokers().clone());
    let outcomes = outboxd::plugin::test_plugin_with_brokers(
        options.file,
        options.config,
        options.events.clone(),
        options.allow_hosts,
        &brokers,
        settings,
    )
    .await?;
    if let Some(broker) = &broker {
        print!(
            "{}",
            StandInReport {
                broker,
                received: &broker.received(),
            }
        );
    }
    println!(
        "{}",
        TestReport {
            events: &options.events,
            outcomes: &outcomes,
        }
    );
    Ok(())
}
