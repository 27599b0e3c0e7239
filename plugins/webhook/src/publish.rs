//! One batch: build a signed request per event, send them all at once, classify the answers.

use outboxd_plugin::http::{Platform, Request, classify};
use outboxd_plugin::trace::{self, TraceContext};
use outboxd_plugin::{Event, PublishError};

use crate::config::Config;
use crate::payload::body;
use crate::signature::signature_header;

/// Publishes `batch` through `platform`; one result per event, in order.
pub fn publish_batch(
    config: &Config,
    platform: &mut impl Platform,
    batch: &[Event],
) -> Vec<Result<(), PublishError>> {
    let timestamp = platform.unix_time_secs();
    let requests = batch
        .iter()
        .map(|event| request(config, event, trace::context(event).as_ref(), timestamp))
        .collect();
    let mut outcomes = platform.send_all(requests, config.timeout).into_iter();
    batch
        .iter()
        .map(|_| match outcomes.next() {
            Some(outcome) => classify(outcome, timestamp, "webhook").map(|_| ()),
            None => Err(PublishError::Retryable(
                "webhook: no response recorded for this event".to_string(),
            )),
        })
        .collect()
}

/// The signed Standard Webhooks request for `event`, stamped `timestamp` (unix seconds), with
/// the `traceparent` and `tracestate` headers of its trace context when it has one.
pub fn request(
    config: &Config,
    event: &Event,
    trace: Option<&TraceContext>,
    timestamp: u64,
) -> Request {
    let (payload, content_type) = body(&config.content, event);
    let signature = signature_header(&config.secrets, &event.event_id, timestamp, &payload);
    let mut headers = vec![
        ("content-type".to_string(), content_type),
        ("webhook-id".to_string(), event.event_id.clone()),
        ("webhook-timestamp".to_string(), timestamp.to_string()),
        ("webhook-signature".to_string(), signature),
    ];
    headers.extend(trace.map(trace::headers).unwrap_or_default());
    Request {
        url: config.url.clone(),
        headers,
        body: payload,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use outboxd_plugin::http::{HttpError, Response};

    use super::*;
    use crate::config::Content;
    use crate::signature::sign;

    /// A test event with id `id`.
    pub(crate) fn event(id: &str) -> Event {
        Event {
            app_code: "app".into(),
            event_id: id.into(),
            event_type: "room.member.joined".into(),
            room_id: "r-1".into(),
            room_version: 7,
            occurred_at_ms: 1_700_000_000_000,
            body: br#"{"k":1}"#.to_vec(),
            attempt: 2,
        }
    }

    /// Records what it is asked to send and answers with canned outcomes.
    struct FakePlatform {
        now: u64,
        answers: Vec<Result<Response, HttpError>>,
        sent: Vec<Request>,
        timeout: Option<Duration>,
    }

    impl Platform for FakePlatform {
        fn send_all(
            &mut self,
            requests: Vec<Request>,
            timeout: Duration,
        ) -> Vec<Result<Response, HttpError>> {
            self.sent.extend(requests);
            self.timeout = Some(timeout);
            std::mem::take(&mut self.answers)
        }

        fn unix_time_secs(&self) -> u64 {
            self.now
        }
    }

    fn status(code: u16) -> Result<Response, HttpError> {
        Ok(Response {
            status: code,
            headers: Vec::new(),
            body: Vec::new(),
        })
    }

    fn config() -> Config {
        Config {
            url: "http://127.0.0.1:1/hook".into(),
            secrets: vec![b"k1".to_vec(), b"k2".to_vec()],
            content: Content::Json,
            timeout: Duration::from_millis(1234),
        }
    }

    #[test]
    fn sends_one_signed_request_per_event_and_classifies_in_order() {
        let mut platform = FakePlatform {
            now: 1_700_000_123,
            answers: vec![
                status(200),
                status(503),
                Err(HttpError::Timeout),
                status(410),
            ],
            sent: Vec::new(),
            timeout: None,
        };
        let batch = [event("a"), event("b"), event("c"), event("d")];
        let results = publish_batch(&config(), &mut platform, &batch);
        assert!(results[0].is_ok());
        assert!(matches!(results[1], Err(PublishError::Retryable(_))));
        assert!(matches!(results[2], Err(PublishError::Retryable(_))));
        assert!(matches!(results[3], Err(PublishError::Permanent(_))));
        assert_eq!(platform.timeout, Some(Duration::from_millis(1234)));
        assert_eq!(platform.sent.len(), 4);

        let first = &platform.sent[0];
        assert_eq!(first.url, "http://127.0.0.1:1/hook");
        let header = |name: &str| {
            first
                .headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(header("webhook-id"), "a");
        assert_eq!(header("webhook-timestamp"), "1700000123");
        assert_eq!(header("content-type"), "application/json");
        let expected = format!(
            "{} {}",
            sign(b"k1", "a", 1_700_000_123, &first.body),
            sign(b"k2", "a", 1_700_000_123, &first.body)
        );
        assert_eq!(header("webhook-signature"), expected);
        assert!(
            !first.headers.iter().any(|(k, _)| k.starts_with("trace")),
            "no context, no trace headers"
        );
    }

    #[test]
    fn a_traced_event_carries_traceparent_and_tracestate() {
        let mut context = TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: "rojo=00f067aa0ba902b7".into(),
        };
        let traced = request(&config(), &event("a"), Some(&context), 1);
        let trace_headers: Vec<_> = traced
            .headers
            .iter()
            .filter(|(k, _)| k.starts_with("trace"))
            .cloned()
            .collect();
        assert_eq!(
            trace_headers,
            [
                ("traceparent".to_string(), context.traceparent.clone()),
                ("tracestate".to_string(), context.tracestate.clone())
            ]
        );
        context.tracestate.clear();
        let traced = request(&config(), &event("a"), Some(&context), 1);
        assert!(!traced.headers.iter().any(|(k, _)| k == "tracestate"));
    }

    #[test]
    fn a_short_answer_list_fails_the_rest_as_retryable() {
        let mut platform = FakePlatform {
            now: 1,
            answers: vec![status(204)],
            sent: Vec::new(),
            timeout: None,
        };
        let results = publish_batch(&config(), &mut platform, &[event("a"), event("b")]);
        assert!(results[0].is_ok());
        assert!(matches!(results[1], Err(PublishError::Retryable(_))));
    }
}
