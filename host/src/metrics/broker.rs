//! The metrics of `[[broker]]` connections: connected, publish latency, messages by result,
//! errors by kind, each labelled with the connection's name.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a connection's series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BrokerLabels {
    /// The `[[broker]]` name.
    pub broker: String,
}

/// Labels of a connection's counted messages or errors.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BrokerKindLabels {
    /// The `[[broker]]` name.
    pub broker: String,
    /// `confirmed`, `retryable`, `permanent`, `rate_limited` (messages); `connect`,
    /// `disconnect`, `timeout` (errors).
    pub kind: String,
}

/// The broker families of one registry.
#[derive(Clone)]
pub struct BrokerMetrics {
    connected: Family<BrokerLabels, Gauge>,
    publish: Family<BrokerLabels, Histogram>,
    messages: Family<BrokerKindLabels, Counter>,
    errors: Family<BrokerKindLabels, Counter>,
}

/// Publish-to-confirmation buckets: 0.5 ms … ~16 s.
fn publish_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl BrokerMetrics {
    /// Registers the families in `registry` (prefix `outboxd_broker_`).
    pub(super) fn register(registry: &mut Registry) -> BrokerMetrics {
        let connected = Family::<BrokerLabels, Gauge>::default();
        registry.register(
            "broker_connected",
            "Whether the [[broker]] connection is up (1) or down (0)",
            connected.clone(),
        );
        let publish =
            Family::<BrokerLabels, Histogram>::new_with_constructor(publish_histogram as fn() -> _);
        registry.register(
            "broker_publish_duration_seconds",
            "Time from handing a plugin's messages to a [[broker]] connection until the broker confirmed (or refused) every one",
            publish.clone(),
        );
        let messages = Family::<BrokerKindLabels, Counter>::default();
        registry.register(
            "broker_messages",
            "Messages published on a [[broker]] connection, by result: confirmed, retryable, permanent, rate_limited",
            messages.clone(),
        );
        let errors = Family::<BrokerKindLabels, Counter>::default();
        registry.register(
            "broker_errors",
            "Errors of a [[broker]] connection: connect (an attempt failed), disconnect (a live connection was lost), timeout (unconfirmed at the publish deadline)",
            errors.clone(),
        );
        BrokerMetrics {
            connected,
            publish,
            messages,
            errors,
        }
    }

    /// Records whether `broker` is connected.
    pub fn set_connected(&self, broker: &str, connected: bool) {
        self.connected
            .get_or_create(&labels(broker))
            .set(i64::from(connected));
    }

    /// Whether `broker` was last recorded connected.
    pub fn connected(&self, broker: &str) -> bool {
        self.connected.get_or_create(&labels(broker)).get() == 1
    }

    /// Records one publish call's time to its last confirmation.
    pub fn observe_publish(&self, broker: &str, elapsed: Duration) {
        self.publish
            .get_or_create(&labels(broker))
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one published message of `broker` by its result (`confirmed`, `retryable`,
    /// `permanent`, `rate_limited`).
    pub fn count_message(&self, broker: &str, kind: &str) {
        self.messages.get_or_create(&kinds(broker, kind)).inc();
    }

    /// Messages of `broker` counted with `kind` so far.
    pub fn messages(&self, broker: &str, kind: &str) -> u64 {
        self.messages.get_or_create(&kinds(broker, kind)).get()
    }

    /// Counts one error of `broker`.
    pub fn count_error(&self, broker: &str, kind: &str) {
        self.errors.get_or_create(&kinds(broker, kind)).inc();
    }

    /// Errors of `broker` counted with `kind` so far.
    pub fn errors(&self, broker: &str, kind: &str) -> u64 {
        self.errors.get_or_create(&kinds(broker, kind)).get()
    }
}

fn labels(broker: &str) -> BrokerLabels {
    BrokerLabels {
        broker: broker.to_string(),
    }
}

fn kinds(broker: &str, kind: &str) -> BrokerKindLabels {
    BrokerKindLabels {
        broker: broker.to_string(),
        kind: kind.to_string(),
    }
}
