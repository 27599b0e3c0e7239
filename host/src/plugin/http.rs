//! Outbound HTTP (wasi:http 0.2) of sinks whose `limits.allow_hosts` allows hosts: the per-sink
//! [`HttpPolicy`] and the [`SinkHttpHooks`] applying it to every request a plugin sends.
//!
//! Before a request leaves the host: its origin (scheme, host, port) must be in the allowlist,
//! else it fails with `HttpRequestDenied` and a warning naming the sink and the URL (without its
//! query string, which may carry credentials); then it waits for one of the sink's
//! `max_concurrent_requests` slots (held until the response head arrives) and for a token of the
//! sink's [`TokenBucket`] (never refused). It goes only to an address the sink may reach: a name
//! that resolves to internal addresses only is refused (`egress`). It is sent with the sink's
//! connect and first-byte timeouts
//! (capping what the plugin asks for), and its response fails with `HttpResponseBodySize` once
//! the body exceeds `max_response_size` (at once when `content-length` announces more).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Uri;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::egress::{self, AddressRule};
use crate::config::SinkLimits;

/// The future `send_request` resolves to: the response and the connection's I/O driver.
type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

/// One allowlist entry: `scheme://host[:port]`, the port defaulted by the scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin {
    /// `http` or `https`.
    scheme: &'static str,
    /// Lower-case host name or IP literal (IPv6 without brackets).
    host: String,
    /// Explicit port, or 80 / 443.
    port: u16,
}

impl AllowedOrigin {
    /// Parses `http://host[:port]` or `https://host[:port]` (a trailing `/` is allowed; a path,
    /// query, user info or any other scheme is not).
    pub fn parse(entry: &str) -> Result<AllowedOrigin, String> {
        let bad = |why: &str| format!("limits.allow_hosts entry `{entry}` {why}");
        let (scheme, rest) = entry
            .split_once("://")
            .ok_or_else(|| bad("must look like https://host[:port]"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => "http",
            "https" => "https",
            _ => return Err(bad("must use http:// or https://")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(bad(
                "must be an origin only (scheme://host[:port]: no path, query or user info)",
            ));
        }
        let uri: Uri = format!("{scheme}://{authority}/")
            .parse()
            .map_err(|_| bad("has a malformed host or port"))?;
        let host = uri.host().map(normalize_host).unwrap_or_default();
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        let after_host = authority
            .rsplit_once(']')
            .map_or(authority, |(_, rest)| rest);
        let port = match after_host.rsplit_once(':') {
            None => default_port(scheme),
            Some((_, port)) => port.parse().map_err(|_| bad("has an invalid port"))?,
        };
        Ok(AllowedOrigin { scheme, host, port })
    }

    /// Whether `uri` (an absolute request URI) has this origin.
    fn matches(&self, uri: &Uri) -> bool {
        let Some(scheme) = uri.scheme_str().map(str::to_ascii_lowercase) else {
            return false;
        };
        let Some(host) = uri.host().map(normalize_host) else {
            return false;
        };
        scheme == self.scheme
            && host == self.host
            && uri.port_u16().unwrap_or_else(|| default_port(&scheme)) == self.port
    }
}

/// Lower-case, IPv6 brackets dropped.
fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// 443 for `https`, else 80.
fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

/// A request's URL for a log line: scheme, authority and path, never the query string.
fn loggable(uri: &Uri) -> String {
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or("?"),
        uri.authority().map_or("", |a| a.as_str()),
        uri.path()
    )
}

/// A sink's outbound-HTTP rules, shared by all its instances.
#[derive(Debug)]
pub struct HttpPolicy {
    sink: Arc<str>,
    allow: Vec<AllowedOrigin>,
    /// Which resolved addresses requests may connect to.
    addresses: AddressRule,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    max_response_size: u64,
    rate: Option<TokenBucket>,
    /// `limits.max_concurrent_requests` permits, shared by all the sink's instances.
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl HttpPolicy {
    /// The policy of sink `sink` from its limits; `Err(reason)` for an unusable allowlist entry
    /// or a zero timeout or size cap (checked only when hosts are allowed).
    pub fn new(sink: Arc<str>, limits: &SinkLimits) -> Result<HttpPolicy, String> {
        let allow = limits
            .allow_hosts
            .iter()
            .map(|entry| AllowedOrigin::parse(entry))
            .collect::<Result<Vec<_>, _>>()?;
        if !allow.is_empty() {
            if limits.connect_timeout.is_zero() {
                return Err("limits.connect_timeout must be greater than zero".into());
            }
            if limits.first_byte_timeout.is_zero() {
                return Err("limits.first_byte_timeout must be greater than zero".into());
            }
            if limits.max_response_size.0 == 0 {
                return Err("limits.max_response_size must be greater than zero".into());
            }
        }
        if limits.max_concurrent_requests == 0 {
            return Err("limits.max_concurrent_requests must be at least 1".into());
        }
        let addresses = AddressRule {
            allow_private: limits.allow_private_addresses,
            literals: allow
                .iter()
                .filter_map(|origin| origin.host.parse().ok())
                .collect(),
        };
        Ok(HttpPolicy {
            sink,
            allow,
            addresses,
            connect_timeout: limits.connect_timeout,
            first_byte_timeout: limits.first_byte_timeout,
            max_response_size: limits.max_response_size.0,
            rate: (limits.max_requests_per_second > 0)
                .then(|| TokenBucket::new(limits.max_requests_per_second)),
            in_flight: Arc::new(tokio::sync::Semaphore::new(
                limits.max_concurrent_requests as usize,
            )),
        })
    }

    /// Whether the sink allows any host (wasi:http is linked only then).
    pub fn allows_any(&self) -> bool {
        !self.allow.is_empty()
    }

    /// Whether a request to `uri` may leave the host.
    fn allows(&self, uri: &Uri) -> bool {
        self.allow.iter().any(|origin| origin.matches(uri))
    }

    /// The plugin's request options capped by the sink's timeouts (between-bytes gaps by the
    /// first-byte timeout).
    fn options(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let asked = asked.unwrap_or_default();
        let cap =
            |asked: Option<Duration>, limit: Duration| Some(asked.map_or(limit, |a| a.min(limit)));
        RequestOptions {
            connect_timeout: cap(asked.connect_timeout, self.connect_timeout),
            first_byte_timeout: cap(asked.first_byte_timeout, self.first_byte_timeout),
            between_bytes_timeout: cap(asked.between_bytes_timeout, self.first_byte_timeout),
        }
    }

    /// Checks, paces and sends one request; caps its response body.
    async fn send(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> SendResult {
        if !self.allows(request.uri()) {
            tracing::warn!(
                sink = %self.sink,
                url = %loggable(request.uri()),
                "outbound request refused: its origin is not in the sink's limits.allow_hosts"
            );
            return Err(HttpError::HttpRequestDenied);
        }
        // One of `max_concurrent_requests` slots from sending until the response head arrives
        // (a plugin may hold responses unread while it sends more, so the body does not keep it).
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| HttpError::InternalError(Some("request slots closed".into())))?;
        if let Some(bucket) = &self.rate {
            bucket.acquire().await;
        }
        let url = loggable(request.uri());
        let sent = egress::send(request, self.options(options), &self.addresses).await;
        drop(permit);
        let (response, io) = match sent {
            Ok(sent) => sent,
            Err((error, refused)) => {
                if let Some(refused) = refused {
                    tracing::warn!(
                        sink = %self.sink,
                        url = %url,
                        address = %refused.address,
                        "outbound request refused: `{}` resolves to an internal address; name the \
                         IP literal in limits.allow_hosts or set limits.allow_private_addresses",
                        refused.host
                    );
                }
                return Err(error);
            }
        };
        let announced = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if let Some(length) = announced.filter(|&length| length > self.max_response_size) {
            self.warn_too_large(&url, length);
            return Err(HttpError::HttpResponseBodySize(Some(length)));
        }
        let response = response.map(|body| {
            CappedBody {
                inner: body.boxed_unsync(),
                read: 0,
                policy: self.clone(),
                url,
            }
            .boxed_unsync()
        });
        Ok((response, Box::new(io)))
    }

    fn warn_too_large(&self, url: &str, size: u64) {
        tracing::warn!(
            sink = %self.sink,
            url = %url,
            size,
            limit = self.max_response_size,
            "response refused: its body exceeds the sink's limits.max_response_size"
        );
    }
}

/// The wasi:http hooks of one plugin instance: every request goes through its sink's policy.
pub struct SinkHttpHooks {
    policy: Arc<HttpPolicy>,
}

impl SinkHttpHooks {
    /// Hooks applying `policy`.
    pub fn new(policy: Arc<HttpPolicy>) -> SinkHttpHooks {
        SinkHttpHooks { policy }
    }
}

impl WasiHttpHooks for SinkHttpHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        Box::new(self.policy.clone().send(request, options))
    }
}

/// A response body failing with `HttpResponseBodySize` once more than the sink's
/// `max_response_size` bytes arrived.
struct CappedBody {
    inner: WasiBody,
    read: u64,
    policy: Arc<HttpPolicy>,
    url: String,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref))
            && let Some(data) = data
        {
            self.read = self.read.saturating_add(data.len() as u64);
            if self.read > self.policy.max_response_size {
                self.policy.warn_too_large(&self.url, self.read);
                return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(self.read)))));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A token bucket of `rate` tokens per second holding at most `rate` (the burst). A request
/// takes a token, waiting for it when the bucket is empty; waiters queue by reserving tokens
/// ahead (the balance goes negative), so the rate holds under any concurrency.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    state: Mutex<Bucket>,
}

/// The bucket's balance at `at`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `per_second` tokens (at least 1).
    pub fn new(per_second: u32) -> TokenBucket {
        let rate = f64::from(per_second.max(1));
        TokenBucket {
            rate,
            state: Mutex::new(Bucket {
                tokens: rate,
                at: Instant::now(),
            }),
        }
    }

    /// Takes a token, waiting until it is available.
    pub async fn acquire(&self) {
        let wait = {
            let mut bucket = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let refill = now.duration_since(bucket.at).as_secs_f64() * self.rate;
            bucket.tokens = (bucket.tokens + refill).min(self.rate) - 1.0;
            bucket.at = now;
            (bucket.tokens < 0.0).then(|| Duration::from_secs_f64(-bucket.tokens / self.rate))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    #[test]
    fn origins_match_scheme_host_and_port() {
        let origin = AllowedOrigin::parse("https://Hooks.Example.com").unwrap();
        assert!(origin.matches(&uri("https://hooks.example.com/a?b=c")));
        assert!(origin.matches(&uri("https://hooks.example.com:443/")));
        assert!(!origin.matches(&uri("http://hooks.example.com/")));
        assert!(!origin.matches(&uri("https://hooks.example.com:8443/")));
        assert!(!origin.matches(&uri("https://evil.hooks.example.com/")));
        assert!(!origin.matches(&uri("https://hooks.example.com.evil/")));

        let local = AllowedOrigin::parse("http://127.0.0.1:8080/").unwrap();
        assert!(local.matches(&uri("http://127.0.0.1:8080/x")));
        assert!(!local.matches(&uri("http://127.0.0.1/x")));

        let v6 = AllowedOrigin::parse("http://[::1]:9000").unwrap();
        assert!(v6.matches(&uri("http://[::1]:9000/")));
    }

    #[test]
    fn bad_entries_are_refused() {
        for entry in [
            "example.com",
            "ftp://example.com",
            "https://example.com/path",
            "https://user@example.com",
            "https://",
            "https://example.com:99999",
            "https://example.com:",
        ] {
            assert!(AllowedOrigin::parse(entry).is_err(), "{entry} accepted");
        }
    }

    #[test]
    fn capped_timeouts() {
        let limits = SinkLimits {
            allow_hosts: vec!["http://127.0.0.1".into()],
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(3),
            ..SinkLimits::default()
        };
        let policy = HttpPolicy::new(Arc::from("s"), &limits).unwrap();
        let options = policy.options(Some(RequestOptions {
            connect_timeout: Some(Duration::from_secs(1)),
            first_byte_timeout: Some(Duration::from_secs(60)),
            between_bytes_timeout: None,
        }));
        assert_eq!(options.connect_timeout, Some(Duration::from_secs(1)));
        assert_eq!(options.first_byte_timeout, Some(Duration::from_secs(3)));
        assert_eq!(options.between_bytes_timeout, Some(Duration::from_secs(3)));
    }

    #[tokio::test]
    async fn the_bucket_allows_a_burst_then_paces() {
        let bucket = TokenBucket::new(50);
        let started = Instant::now();
        for _ in 0..75 {
            bucket.acquire().await;
        }
        // 50 at once, then 25 more at 50/s: at least ~0.5 s.
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
    }
}
