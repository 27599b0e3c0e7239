//! One batch: a request per event (all sharing the cached usersig), sent at once, classified.

use outboxd_plugin::http::{Platform, Request};
use outboxd_plugin::{Event, PublishError};

use crate::classify::classify;
use crate::config::Config;
use crate::message::{body, random_for, url};
use crate::usersig::{CachedSig, generate};

/// The plugin's state: settings and the usersig in use; sends one batch to Tencent Cloud IM.
pub struct ImSender {
    /// The parsed settings.
    config: Config,
    /// The last usersig made, reused while fresh.
    usersig: Option<CachedSig>,
}

impl ImSender {
    /// A sender for `config`, with no usersig made yet.
    pub fn new(config: Config) -> ImSender {
        ImSender {
            config,
            usersig: None,
        }
    }

    /// Publishes `batch` through `platform`; one result per event, in order.
    pub fn publish_batch(
        &mut self,
        platform: &mut impl Platform,
        batch: &[Event],
    ) -> Vec<Result<(), PublishError>> {
        let now = platform.unix_time_secs();
        let usersig = self.usersig_at(now);
        let requests = batch
            .iter()
            .map(|event| Request {
                url: url(&self.config, &usersig, random_for(&event.event_id)),
                headers: vec![("content-type".to_string(), "application/json".to_string())],
                body: body(&self.config, event).to_string().into_bytes(),
            })
            .collect();
        let mut outcomes = platform.send_all(requests, self.config.timeout).into_iter();
        batch
            .iter()
            .map(|_| {
                let Some(outcome) = outcomes.next() else {
                    return Err(PublishError::Retryable(
                        "im: no response recorded for this event".to_string(),
                    ));
                };
                let verdict = classify(outcome, now);
                if verdict.auth_failed {
                    self.usersig = None;
                }
                verdict.result
            })
            .collect()
    }

    /// The cached usersig if fresh at `now`, else a new one (then cached).
    fn usersig_at(&mut self, now: u64) -> String {
        match &self.usersig {
            Some(cached) if cached.fresh_at(now) => cached.sig.clone(),
            _ => {
                let config = &self.config;
                let expire = config.usersig_expire_secs;
                let sig = generate(
                    config.sdkappid,
                    &config.identifier,
                    &config.secret_key,
                    now,
                    expire,
                );
                self.usersig = Some(CachedSig {
                    sig: sig.clone(),
                    time: now,
                    expire,
                });
                sig
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use outboxd_plugin::http::{HttpError, Response};

    use super::*;
    use crate::config::Mode;

    /// A test event with id `id` in room `room`.
    pub(crate) fn event(id: &str, room: &str) -> Event {
        Event {
            app_code: "app".into(),
            event_id: id.into(),
            event_type: "room.member.joined".into(),
            room_id: room.into(),
            room_version: 7,
            occurred_at_ms: 1_700_000_000_000,
            body: br#"{"k":1}"#.to_vec(),
            attempt: 1,
        }
    }

    /// Test settings in `mode`, endpoint `http://127.0.0.1:1`, prefix `room_`.
    pub(crate) fn config(mode: Mode) -> Config {
        Config {
            endpoint: "http://127.0.0.1:1".into(),
            sdkappid: 1_400_000_000,
            identifier: "admin".into(),
            secret_key: "key".into(),
            group_prefix: "room_".into(),
            mode,
            usersig_expire_secs: 100,
            timeout: Duration::from_secs(2),
        }
    }

    /// Records what it is asked to send and answers every request with one canned IM code.
    struct FakePlatform {
        now: u64,
        code: i64,
        sent: Vec<Request>,
    }

    impl Platform for FakePlatform {
        fn send_all(
            &mut self,
            requests: Vec<Request>,
            _timeout: Duration,
        ) -> Vec<Result<Response, HttpError>> {
            let body = format!(
                r#"{{"ActionStatus":"{}","ErrorCode":{}}}"#,
                if self.code == 0 { "OK" } else { "FAIL" },
                self.code
            );
            let answers = requests
                .iter()
                .map(|_| {
                    Ok(Response {
                        status: 200,
                        headers: Vec::new(),
                        body: body.clone().into_bytes(),
                    })
                })
                .collect();
            self.sent.extend(requests);
            answers
        }

        fn unix_time_secs(&self) -> u64 {
            self.now
        }
    }

    fn query_param<'a>(url: &'a str, name: &str) -> &'a str {
        let query = url.split_once('?').unwrap().1;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .unwrap()
    }

    #[test]
    fn sends_one_request_per_event_with_stable_random() {
        let mut publisher = ImSender::new(config(Mode::GroupMessage));
        let mut platform = FakePlatform {
            now: 1000,
            code: 0,
            sent: Vec::new(),
        };
        let results = publisher.publish_batch(&mut platform, &[event("a", "r1"), event("b", "r2")]);
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(platform.sent.len(), 2);
        let first = &platform.sent[0];
        assert!(first.url.starts_with("http://127.0.0.1:1/v4/group_open_http_svc/send_group_msg?sdkappid=1400000000&identifier=admin&usersig="));
        assert_eq!(
            query_param(&first.url, "random"),
            random_for("a").to_string()
        );
        assert_eq!(query_param(&first.url, "contenttype"), "json");
        let body: serde_json::Value = serde_json::from_slice(&first.body).unwrap();
        assert_eq!(body["GroupId"], "room_r1");
        assert_eq!(body["Random"], random_for("a"));
    }

    #[test]
    fn usersig_is_cached_until_near_expiry() {
        let mut publisher = ImSender::new(config(Mode::SystemNotification));
        let mut platform = FakePlatform {
            now: 1000,
            code: 0,
            sent: Vec::new(),
        };
        publisher.publish_batch(&mut platform, &[event("a", "r")]);
        platform.now = 1089;
        publisher.publish_batch(&mut platform, &[event("a", "r")]);
        platform.now = 1091;
        publisher.publish_batch(&mut platform, &[event("a", "r")]);
        let sigs: Vec<&str> = platform
            .sent
            .iter()
            .map(|r| query_param(&r.url, "usersig"))
            .collect();
        assert_eq!(
            sigs[0], sigs[1],
            "reused while more than 10% of its life is left"
        );
        assert_ne!(sigs[1], sigs[2], "regenerated near expiry");
        assert!(
            platform.sent[0]
                .url
                .contains("/v4/group_open_http_svc/send_group_system_notification?")
        );
    }

    #[test]
    fn auth_failures_drop_the_cached_usersig() {
        let mut publisher = ImSender::new(config(Mode::GroupMessage));
        let mut platform = FakePlatform {
            now: 1000,
            code: 70009,
            sent: Vec::new(),
        };
        let results = publisher.publish_batch(&mut platform, &[event("a", "r")]);
        assert!(matches!(results[0], Err(PublishError::Permanent(_))));
        assert!(publisher.usersig.is_none());
        platform.code = 10010;
        publisher.publish_batch(&mut platform, &[event("a", "r")]);
        assert!(publisher.usersig.is_some());
    }
}
