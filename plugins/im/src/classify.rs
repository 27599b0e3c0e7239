//! Turns an IM REST answer into a publish result.
//!
//! HTTP first, by the SDK's `http::classify` (429 and 5xx retryable, rate-limited when
//! `Retry-After` says how long; other 4xx and 3xx permanent); 2xx answers are then read as JSON
//! (`ActionStatus`, `ErrorCode`, `ErrorInfo`).
//! Then the error code, by the table in [`code_class`]. A code outside the table is retryable, so
//! an unknown transient error never loses an event (outboxd's retry policy bounds the attempts).

use outboxd_plugin::http::{self, HttpError, Response, SNIPPET_CHARS, snippet};
use outboxd_plugin::{PublishError, RateLimit};
use serde_json::Value;

/// Delay asked for after an IM rate-limit code (IM's limits are per second).
const RATE_LIMIT_DELAY_MS: u64 = 1000;

/// What an `ErrorCode` means for the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Transient (internal error, timeout, network): retry.
    Retryable,
    /// A frequency limit: retry after [`RATE_LIMIT_DELAY_MS`].
    RateLimited,
    /// The request can never succeed (bad request, group gone, no permission).
    Permanent,
    /// The usersig or admin account was refused: permanent, and the cached usersig is dropped.
    Auth,
}

/// The class of IM `ErrorCode` `code` (non-zero). The table (also in docs/plugins/im.md):
///
/// | codes | meaning | class |
/// |---|---|---|
/// | 10002, 20004, 20005, 60008, 60013, 60014, 70169 | internal error / network error / server timeout | retryable |
/// | 10006, 10023, 60007, 60011, 60018, 60019 | call or message frequency limit | rate-limited |
/// | 10003, 10004, 10005, 10011, 10018, 60002, 60003, 60009, 60012, 60015 | bad request (API name, parameters, JSON, size) | permanent |
/// | 10007, 10016, 10017, 10026, 60010, 60016, 60017, 60020, 60021 | no permission, refused by callback, muted, disabled | permanent |
/// | 10010, 10015 | group dismissed / does not exist | permanent |
/// | 10012, 10019 | account invalid / does not exist | permanent |
/// | 80001, 80002, 80004 | content moderation, message too long | permanent |
/// | 10008, 60004, 60005, 60006, 70001, 70003, 70009, 70013, 70014, 70016, 70020, 70050, 70051, 70107 | usersig / admin account / SDKAppID refused | permanent (auth) |
pub fn code_class(code: i64) -> Class {
    match code {
        10002 | 20004 | 20005 | 60008 | 60013 | 60014 | 70169 => Class::Retryable,
        10006 | 10023 | 60007 | 60011 | 60018 | 60019 => Class::RateLimited,
        10003 | 10004 | 10005 | 10011 | 10018 | 60002 | 60003 | 60009 | 60012 | 60015 => {
            Class::Permanent
        }
        10007 | 10016 | 10017 | 10026 | 60010 | 60016 | 60017 | 60020 | 60021 => Class::Permanent,
        10010 | 10015 | 10012 | 10019 | 80001 | 80002 | 80004 => Class::Permanent,
        10008 | 60004 | 60005 | 60006 | 70001 | 70003 | 70009 | 70013 | 70014 | 70016 | 70020
        | 70050 | 70051 | 70107 => Class::Auth,
        _ => Class::Retryable,
    }
}

/// The outcome of one request: the publish result and whether the usersig must be regenerated.
#[derive(Debug)]
pub struct Verdict {
    /// What outboxd is told.
    pub result: Result<(), PublishError>,
    /// The answer refused our credentials: drop the cached usersig.
    pub auth_failed: bool,
}

/// Classifies one request's outcome; `now_unix_secs` resolves an HTTP-date `Retry-After`.
pub fn classify(outcome: Result<Response, HttpError>, now_unix_secs: u64) -> Verdict {
    let verdict = |result| Verdict {
        result,
        auth_failed: false,
    };
    let response = match http::classify(outcome, now_unix_secs, "im") {
        Ok(response) => response,
        Err(error) => return verdict(Err(error)),
    };
    let http_message = || {
        let body = snippet(&response.body, SNIPPET_CHARS);
        if body.is_empty() {
            format!("im: HTTP {}", response.status)
        } else {
            format!("im: HTTP {}: {body}", response.status)
        }
    };
    let Ok(answer) = serde_json::from_slice::<Value>(&response.body) else {
        return verdict(Err(PublishError::Retryable(format!(
            "{} (not a JSON answer)",
            http_message()
        ))));
    };
    let code = answer.get("ErrorCode").and_then(Value::as_i64);
    let ok = answer.get("ActionStatus").and_then(Value::as_str) == Some("OK");
    let code = match (ok, code) {
        (true, None | Some(0)) => return verdict(Ok(())),
        (_, Some(code)) if code != 0 => code,
        _ => {
            return verdict(Err(PublishError::Retryable(format!(
                "{} (no ActionStatus OK nor a non-zero ErrorCode)",
                http_message()
            ))));
        }
    };
    let info = answer
        .get("ErrorInfo")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = format!(
        "im: ErrorCode {code}: {}",
        snippet(info.as_bytes(), SNIPPET_CHARS)
    );
    match code_class(code) {
        Class::Retryable => verdict(Err(PublishError::Retryable(message))),
        Class::RateLimited => verdict(Err(PublishError::RateLimited(RateLimit {
            message,
            retry_after_ms: RATE_LIMIT_DELAY_MS,
        }))),
        Class::Permanent => verdict(Err(PublishError::Permanent(message))),
        Class::Auth => Verdict {
            result: Err(PublishError::Permanent(message)),
            auth_failed: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Result<Response, HttpError> {
        Ok(Response {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        })
    }

    fn im(code: i64) -> Result<Response, HttpError> {
        let status = if code == 0 { "OK" } else { "FAIL" };
        answer(
            200,
            &format!(
                r#"{{"ActionStatus":"{status}","ErrorCode":{code},"ErrorInfo":"info {code}"}}"#
            ),
        )
    }

    fn kind(verdict: &Verdict) -> &'static str {
        match verdict.result {
            Ok(()) => "ok",
            Err(PublishError::Retryable(_)) => "retryable",
            Err(PublishError::Permanent(_)) => "permanent",
            Err(PublishError::RateLimited(_)) => "rate-limited",
        }
    }

    #[test]
    fn error_codes() {
        let cases = [
            (0, "ok"),
            (10002, "retryable"),
            (20004, "retryable"),
            (70169, "retryable"),
            (10006, "rate-limited"),
            (10023, "rate-limited"),
            (60007, "rate-limited"),
            (10003, "permanent"),
            (10004, "permanent"),
            (10007, "permanent"),
            (10010, "permanent"),
            (10015, "permanent"),
            (80001, "permanent"),
            (70001, "permanent"),
            (70009, "permanent"),
            (12345, "retryable"),
        ];
        for (code, expected) in cases {
            assert_eq!(kind(&classify(im(code), 0)), expected, "ErrorCode {code}");
        }
    }

    #[test]
    fn auth_codes_drop_the_usersig() {
        for code in [70001, 70003, 70009, 70013, 70014, 60004] {
            assert!(classify(im(code), 0).auth_failed, "{code}");
        }
        assert!(!classify(im(10010), 0).auth_failed);
        assert!(!classify(im(0), 0).auth_failed);
    }

    #[test]
    fn messages_carry_code_and_info() {
        let Err(PublishError::Permanent(message)) = classify(im(10010), 0).result else {
            panic!()
        };
        assert_eq!(message, "im: ErrorCode 10010: info 10010");
        let Err(PublishError::RateLimited(limit)) = classify(im(10023), 0).result else {
            panic!()
        };
        assert_eq!(limit.retry_after_ms, RATE_LIMIT_DELAY_MS);
    }

    #[test]
    fn http_level_answers() {
        assert_eq!(kind(&classify(answer(502, "bad gateway"), 0)), "retryable");
        assert_eq!(kind(&classify(answer(404, "nope"), 0)), "permanent");
        assert_eq!(kind(&classify(answer(200, "<html>"), 0)), "retryable");
        assert_eq!(
            kind(&classify(answer(200, r#"{"ActionStatus":"FAIL"}"#), 0)),
            "retryable"
        );
        assert_eq!(
            kind(&classify(answer(200, r#"{"ActionStatus":"OK"}"#), 0)),
            "ok"
        );
        assert_eq!(kind(&classify(Err(HttpError::Timeout), 0)), "retryable");
        assert_eq!(kind(&classify(Err(HttpError::Denied), 0)), "permanent");
        let limited = Ok(Response {
            status: 429,
            headers: vec![("Retry-After".into(), "3".into())],
            body: Vec::new(),
        });
        let Err(PublishError::RateLimited(limit)) = classify(limited, 0).result else {
            panic!()
        };
        assert_eq!(limit.retry_after_ms, 3000);
        assert_eq!(limit.message, "im: HTTP 429");
    }
}
