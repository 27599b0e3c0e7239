//! Turns a webhook answer into a publish result.
//!
//! 2xx → delivered; 429, 502, 503, 504 and other 5xx → retryable (rate-limited with the delay
//! when a `Retry-After` header is present); 410 and other 4xx → permanent; 3xx (not followed) and
//! 1xx → permanent and retryable respectively; timeouts and transport errors → retryable.

use http_util::{HttpError, Response, retry_after_ms, snippet};

use crate::PublishError;
use crate::outbox::publisher::types::RateLimit;

/// Characters of the response body quoted in an error message.
const SNIPPET_CHARS: usize = 200;

/// The publish result for one request's outcome; `now_unix_secs` resolves an HTTP-date
/// `Retry-After`.
pub fn classify(
    outcome: Result<Response, HttpError>,
    now_unix_secs: u64,
) -> Result<(), PublishError> {
    let response = match outcome {
        Ok(response) => response,
        Err(error) if error.is_permanent() => {
            return Err(PublishError::Permanent(format!("webhook: {error}")));
        }
        Err(error) => return Err(PublishError::Retryable(format!("webhook: {error}"))),
    };
    let status = response.status;
    let message = || {
        let body = snippet(&response.body, SNIPPET_CHARS);
        if body.is_empty() {
            format!("webhook: HTTP {status}")
        } else {
            format!("webhook: HTTP {status}: {body}")
        }
    };
    match status {
        200..=299 => Ok(()),
        410 => Err(PublishError::Permanent(format!(
            "{} (the endpoint is gone)",
            message()
        ))),
        429 | 500..=599 => {
            let delay = response
                .header("retry-after")
                .and_then(|value| retry_after_ms(value, now_unix_secs));
            Err(match delay {
                Some(retry_after_ms) => PublishError::RateLimited(RateLimit {
                    message: message(),
                    retry_after_ms,
                }),
                None => PublishError::Retryable(message()),
            })
        }
        300..=399 => Err(PublishError::Permanent(format!(
            "{} (redirects are not followed: configure the final URL)",
            message()
        ))),
        400..=499 => Err(PublishError::Permanent(message())),
        _ => Err(PublishError::Retryable(message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Result<Response, HttpError> {
        Ok(Response {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        })
    }

    fn kind(result: &Result<(), PublishError>) -> &'static str {
        match result {
            Ok(()) => "ok",
            Err(PublishError::Retryable(_)) => "retryable",
            Err(PublishError::Permanent(_)) => "permanent",
            Err(PublishError::RateLimited(_)) => "rate-limited",
        }
    }

    #[test]
    fn statuses() {
        let cases = [
            (200, "ok"),
            (202, "ok"),
            (204, "ok"),
            (429, "retryable"),
            (502, "retryable"),
            (503, "retryable"),
            (504, "retryable"),
            (500, "retryable"),
            (507, "retryable"),
            (410, "permanent"),
            (400, "permanent"),
            (401, "permanent"),
            (404, "permanent"),
            (413, "permanent"),
            (301, "permanent"),
            (101, "retryable"),
        ];
        for (status, expected) in cases {
            assert_eq!(
                kind(&classify(answer(status, &[], ""), 0)),
                expected,
                "HTTP {status}"
            );
        }
    }

    #[test]
    fn retry_after_makes_it_rate_limited() {
        let result = classify(answer(503, &[("Retry-After", "1")], "busy"), 0);
        let Err(PublishError::RateLimited(limit)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(limit.retry_after_ms, 1000);
        assert_eq!(limit.message, "webhook: HTTP 503: busy");

        let result = classify(
            answer(429, &[("retry-after", "Thu, 01 Jan 1970 00:01:40 GMT")], ""),
            40,
        );
        let Err(PublishError::RateLimited(limit)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(limit.retry_after_ms, 60_000);

        assert_eq!(
            kind(&classify(answer(503, &[("Retry-After", "later")], ""), 0)),
            "retryable"
        );
    }

    #[test]
    fn transport_errors_and_timeouts_are_retryable() {
        assert_eq!(kind(&classify(Err(HttpError::Timeout), 0)), "retryable");
        assert_eq!(kind(&classify(Err(HttpError::Denied), 0)), "permanent");
        let result = classify(Err(HttpError::Transport("ConnectionRefused".into())), 0);
        let Err(PublishError::Retryable(message)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(message, "webhook: transport error: ConnectionRefused");
    }

    #[test]
    fn messages_quote_status_and_a_short_body() {
        let long = "x".repeat(500);
        let Err(PublishError::Permanent(message)) = classify(answer(422, &[], &long), 0) else {
            panic!()
        };
        assert!(message.starts_with("webhook: HTTP 422: xxx"), "{message}");
        assert!(message.chars().count() < 230, "{message}");
        let Err(PublishError::Permanent(message)) = classify(answer(410, &[], ""), 0) else {
            panic!()
        };
        assert_eq!(message, "webhook: HTTP 410 (the endpoint is gone)");
    }
}
