//! Outbound HTTP for outboxd's guest plugins: a batch of POST requests sent concurrently.
//!
//! The plugins' publishing logic talks to the outside world only through the [`Platform`] trait
//! (send a batch of requests, read the wall clock), so it runs and is unit-tested natively with a
//! fake platform. [`WasiPlatform`] is the real one, over wasi:http 0.2: every request of a batch
//! is started with `outgoing-handler.handle` before any is waited for, then all of them are
//! awaited together with `wasi:io/poll.poll` over their pollables and one deadline.
//!
//! The pure helpers ([`Target::parse`], [`Response::header`], [`snippet`], [`retry_after_ms`])
//! are shared by both plugins so they read answers and word their error messages alike.

mod wasi_http;

use std::fmt;
use std::time::Duration;

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
}
