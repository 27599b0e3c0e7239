//! Outbound HTTP for plugins (feature `http`): a batch of POST requests sent concurrently over
//! wasi:http, with one deadline, and the classification of answers into publish results.
//!
//! The plugin's publishing logic talks to the outside world only through the [`Platform`] trait
//! (send a batch of requests, read the wall clock), so it runs and is unit-tested natively with a
//! fake platform. [`WasiPlatform`] is the real one, over wasi:http 0.2: every request of a batch
//! is started with `outgoing-handler.handle` before any is waited for, then all of them are
//! awaited together with `wasi:io/poll.poll` over their pollables and one deadline.
//!
//! [`classify`] turns one request's outcome into a publish result the same way for every plugin
//! (2xx delivered, 429/5xx retryable or rate-limited by `Retry-After`, other 4xx and 3xx
//! permanent, timeouts and transport errors retryable, a request refused by the host's allowlist
//! permanent). The pure helpers ([`Target::parse`], [`Response::header`], [`snippet`],
//! [`retry_after_ms`]) word error messages alike across plugins.

mod wasi_http;

use std::fmt;
use std::time::Duration;

use crate::{PublishError, RateLimit};

pub use wasi_http::WasiPlatform;

/// The most bytes of a response body kept; the rest is read and dropped.
pub const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// One outgoing `POST` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Absolute `http://` or `https://` URL, query string included.
    pub url: String,
    /// Header (name, value) pairs, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Vec<u8>,
}

/// A response: status, headers and (at most [`MAX_RESPONSE_BODY`] bytes of) body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Header (name, value) pairs as received; values that are not UTF-8 are dropped.
    pub headers: Vec<(String, String)>,
    /// The body, cut at [`MAX_RESPONSE_BODY`] bytes.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (compared case-insensitively), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim())
    }
}

/// Why a request got no response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The deadline passed before the response (head and body) arrived.
    Timeout,
    /// The request could not be made or the connection failed; the text says how.
    Transport(String),
    /// The host refused the request by configuration (its origin is not in the sink's
    /// `limits.allow_hosts`): retrying cannot help until the config changes.
    Denied,
}

impl HttpError {
    /// True when only an operator can fix the cause (the request was refused by configuration).
    pub fn is_permanent(&self) -> bool {
        matches!(self, HttpError::Denied)
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Timeout => f.write_str("timed out waiting for the response"),
            HttpError::Transport(why) => write!(f, "transport error: {why}"),
            HttpError::Denied => f.write_str(
                "request denied by the host: the URL's origin is not in the sink's limits.allow_hosts",
            ),
        }
    }
}

/// What a plugin needs from its host: outbound HTTP and the wall clock.
pub trait Platform {
    /// Sends every request at once and waits for all of them, at most `timeout` in total.
    /// Returns one result per request, in order.
    fn send_all(
        &mut self,
        requests: Vec<Request>,
        timeout: Duration,
    ) -> Vec<Result<Response, HttpError>>;

    /// Seconds since the Unix epoch (UTC), from the wall clock.
    fn unix_time_secs(&self) -> u64;
}

/// URL scheme supported for outbound requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain `http://`.
    Http,
    /// `https://`.
    Https,
}

/// An absolute URL split the way wasi:http wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// `host[:port]` (IPv6 literals keep their brackets).
    pub authority: String,
    /// Path and query, starting with `/` (`/` when the URL has no path).
    pub path_with_query: String,
}

impl Target {
    /// Splits `url` (`http://` or `https://`, an authority, an optional path and query; a
    /// fragment is dropped). Refuses other schemes, user-info and an empty host.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (scheme, rest) = if let Some(rest) = strip_prefix_ignore_case(url, "https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = strip_prefix_ignore_case(url, "http://") {
            (Scheme::Http, rest)
        } else {
            return Err(format!("URL `{url}` must start with http:// or https://"));
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() || authority.starts_with(':') {
            return Err(format!("URL `{url}` has no host"));
        }
        if authority.contains('@') {
            return Err(format!("URL `{url}` must not carry user info"));
        }
        if authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!("URL `{url}` has a malformed host"));
        }
        let path_with_query = match path.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{path}"),
            Some(_) => path.to_string(),
        };
        Ok(Target {
            scheme,
            authority: authority.to_string(),
            path_with_query,
        })
    }
}

/// `text` without its `prefix`, compared ASCII case-insensitively.
fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// At most `max_chars` characters of `body` as text for an error message: invalid UTF-8 replaced,
/// control characters (newlines included) shown as spaces, `…` appended when cut.
pub fn snippet(body: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let mut out: String = text
        .chars()
        .take(max_chars)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

/// Parses a `Retry-After` header value into milliseconds from now: either delay-seconds (`120`)
/// or an HTTP-date (IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, RFC 850 `Sunday, 06-Nov-94
/// 08:49:37 GMT` or asctime `Sun Nov  6 08:49:37 1994`), a date in the past giving 0. `None` when
/// the value is neither.
pub fn retry_after_ms(value: &str, now_unix_secs: u64) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            value
                .parse::<u64>()
                .unwrap_or(u64::MAX / 1000)
                .saturating_mul(1000),
        );
    }
    let at = parse_http_date(value)?;
    Some(at.saturating_sub(now_unix_secs).saturating_mul(1000))
}

/// Seconds since the Unix epoch of an HTTP-date in any of the three formats of RFC 9110 §5.6.7.
fn parse_http_date(value: &str) -> Option<u64> {
    let cleaned: String = value
        .chars()
        .map(|c| if c == ',' || c == '-' { ' ' } else { c })
        .collect();
    let mut tokens: Vec<&str> = cleaned.split_whitespace().collect();
    if tokens
        .last()
        .is_some_and(|zone| zone.eq_ignore_ascii_case("GMT") || zone.eq_ignore_ascii_case("UTC"))
    {
        tokens.pop();
    }
    // Drop the weekday; what is left is `day month year time` or (asctime) `month day time year`.
    let tokens = tokens.get(1..)?;
    let (day, month, year, time) = match tokens {
        [day, month, year, time] if day.bytes().all(|b| b.is_ascii_digit()) => {
            (*day, *month, *year, *time)
        }
        [month, day, time, year] => (*day, *month, *year, *time),
        _ => return None,
    };
    let day: u64 = day.parse().ok()?;
    let month = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ]
    .iter()
    .position(|name| month.get(..3).is_some_and(|m| m.eq_ignore_ascii_case(name)))?
        as u64
        + 1;
    let mut year: u64 = year.parse().ok()?;
    if year < 100 {
        // RFC 850's two-digit year: RFC 9110 says read it as the nearest year not more than 50
        // years ahead; a fixed pivot at 70 is what every common implementation does.
        year += if year < 70 { 2000 } else { 1900 };
    }
    let mut clock = time.split(':').map(|part| part.parse::<u64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if clock.next().is_some()
        || !(1..=31).contains(&day)
        || year < 1970
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Characters of a response body quoted in an error message.
pub const SNIPPET_CHARS: usize = 200;

/// Classifies one request's outcome, messages prefixed with `prefix` (e.g. `webhook`):
///
/// | outcome | result |
/// |---|---|
/// | 2xx | `Ok(response)`: delivered, or for the plugin to read further |
/// | 429, 5xx | rate-limited with the delay when `Retry-After` is given, else retryable |
/// | 410 | permanent (the endpoint is gone) |
/// | 3xx (redirects are not followed), other 4xx | permanent |
/// | 1xx, timeout, transport error | retryable |
/// | refused by the host's allowlist | permanent |
///
/// `now_unix_secs` resolves an HTTP-date `Retry-After`. Messages quote the status and at most
/// [`SNIPPET_CHARS`] characters of the body: `webhook: HTTP 503: busy`.
pub fn classify(
    outcome: Result<Response, HttpError>,
    now_unix_secs: u64,
    prefix: &str,
) -> Result<Response, PublishError> {
    let response = match outcome {
        Ok(response) => response,
        Err(error) if error.is_permanent() => {
            return Err(PublishError::Permanent(format!("{prefix}: {error}")));
        }
        Err(error) => return Err(PublishError::Retryable(format!("{prefix}: {error}"))),
    };
    let status = response.status;
    let message = || {
        let body = snippet(&response.body, SNIPPET_CHARS);
        if body.is_empty() {
            format!("{prefix}: HTTP {status}")
        } else {
            format!("{prefix}: HTTP {status}: {body}")
        }
    };
    match status {
        200..=299 => Ok(response),
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

/// Days from 1970-01-01 to the given proleptic Gregorian date (year ≥ 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let target = Target::parse("https://example.com:8443/hooks/a?x=1#frag").unwrap();
        assert_eq!(target.scheme, Scheme::Https);
        assert_eq!(target.authority, "example.com:8443");
        assert_eq!(target.path_with_query, "/hooks/a?x=1");

        let target = Target::parse("HTTP://127.0.0.1:9000").unwrap();
        assert_eq!(target.scheme, Scheme::Http);
        assert_eq!(target.authority, "127.0.0.1:9000");
        assert_eq!(target.path_with_query, "/");

        let target = Target::parse("http://[::1]:80?q=2").unwrap();
        assert_eq!(target.authority, "[::1]:80");
        assert_eq!(target.path_with_query, "/?q=2");
    }

    #[test]
    fn refuses_bad_urls() {
        for url in [
            "ftp://example.com/",
            "example.com/x",
            "http:///x",
            "https://user:pw@host/",
            "http://:80/",
            "http://a b/",
        ] {
            assert!(Target::parse(url).is_err(), "{url} should be refused");
        }
    }

    #[test]
    fn finds_headers_case_insensitively() {
        let response = Response {
            status: 503,
            headers: vec![
                ("Retry-After".into(), " 7 ".into()),
                ("retry-after".into(), "9".into()),
            ],
            body: Vec::new(),
        };
        assert_eq!(response.header("retry-after"), Some("7"));
        assert_eq!(response.header("x-missing"), None);
    }

    #[test]
    fn snippets_are_short_and_single_line() {
        assert_eq!(snippet(b"  oops\nbad\r\n", 100), "oops bad");
        assert_eq!(snippet(b"abcdef", 3), "abc…");
        assert_eq!(snippet(&[0xff, b'a'], 10), "\u{fffd}a");
        assert_eq!(snippet(b"", 10), "");
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(retry_after_ms("1", 0), Some(1000));
        assert_eq!(retry_after_ms(" 120 ", 0), Some(120_000));
        assert_eq!(retry_after_ms("0", 0), Some(0));
        assert_eq!(retry_after_ms("-1", 0), None);
        assert_eq!(retry_after_ms("soon", 0), None);
        assert_eq!(retry_after_ms("", 0), None);
    }

    #[test]
    fn retry_after_dates() {
        // 1994-11-06T08:49:37Z is 784111777 seconds after the epoch.
        let at = 784_111_777;
        for value in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(retry_after_ms(value, at - 30), Some(30_000), "{value}");
            assert_eq!(
                retry_after_ms(value, at + 30),
                Some(0),
                "{value} in the past"
            );
        }
        // 2030-01-01T00:00:00Z = 1893456000.
        assert_eq!(
            retry_after_ms("Tue, 01 Jan 2030 00:00:00 GMT", 1_893_455_999),
            Some(1000)
        );
        assert_eq!(
            retry_after_ms("Tue, 29 Feb 2028 12:00:00 GMT", 0),
            Some(1_835_438_400_000)
        );
        assert_eq!(retry_after_ms("Sun, 06 Foo 1994 08:49:37 GMT", 0), None);
        assert_eq!(retry_after_ms("Sun, 06 Nov 1994 25:49:37 GMT", 0), None);
    }

    #[test]
    fn errors_display() {
        assert_eq!(
            HttpError::Timeout.to_string(),
            "timed out waiting for the response"
        );
        assert_eq!(
            HttpError::Transport("refused".into()).to_string(),
            "transport error: refused"
        );
    }

    /// The webhook plugin's use of [`classify`]: only delivered or not.
    fn webhook(outcome: Result<Response, HttpError>, now: u64) -> Result<(), PublishError> {
        classify(outcome, now, "webhook").map(|_| ())
    }

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
                kind(&webhook(answer(status, &[], ""), 0)),
                expected,
                "HTTP {status}"
            );
        }
    }

    #[test]
    fn retry_after_makes_it_rate_limited() {
        let result = webhook(answer(503, &[("Retry-After", "1")], "busy"), 0);
        let Err(PublishError::RateLimited(limit)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(limit.retry_after_ms, 1000);
        assert_eq!(limit.message, "webhook: HTTP 503: busy");

        let result = webhook(
            answer(429, &[("retry-after", "Thu, 01 Jan 1970 00:01:40 GMT")], ""),
            40,
        );
        let Err(PublishError::RateLimited(limit)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(limit.retry_after_ms, 60_000);

        assert_eq!(
            kind(&webhook(answer(503, &[("Retry-After", "later")], ""), 0)),
            "retryable"
        );
    }

    #[test]
    fn transport_errors_and_timeouts_are_retryable() {
        assert_eq!(kind(&webhook(Err(HttpError::Timeout), 0)), "retryable");
        assert_eq!(kind(&webhook(Err(HttpError::Denied), 0)), "permanent");
        let result = webhook(Err(HttpError::Transport("ConnectionRefused".into())), 0);
        let Err(PublishError::Retryable(message)) = result else {
            panic!("{result:?}")
        };
        assert_eq!(message, "webhook: transport error: ConnectionRefused");
    }

    #[test]
    fn messages_quote_status_and_a_short_body() {
        let long = "x".repeat(500);
        let Err(PublishError::Permanent(message)) = webhook(answer(422, &[], &long), 0) else {
            panic!()
        };
        assert!(message.starts_with("webhook: HTTP 422: xxx"), "{message}");
        assert!(message.chars().count() < 230, "{message}");
        let Err(PublishError::Permanent(message)) = webhook(answer(410, &[], ""), 0) else {
            panic!()
        };
        assert_eq!(message, "webhook: HTTP 410 (the endpoint is gone)");
    }
}
