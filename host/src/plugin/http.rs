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
use crate::config::{AllowedOrigin, SinkSpec};

/// The future `send_request` resolves to: the response and the connection's I/O driver.
type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

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
    /// The policy of sink `sink` from its spec, whose limits the config checked
    /// (`SinkSpec`: origins parsed, timeouts and caps above zero).
    pub fn new(sink: Arc<str>, spec: &SinkSpec) -> HttpPolicy {
        let limits = spec.limits();
        let allow = spec.allowed_origins().to_vec();
        let addresses = AddressRule {
            allow_private: limits.allow_private_addresses,
            literals: allow
                .iter()
                .filter_map(|origin| origin.host().parse().ok())
                .collect(),
        };
        HttpPolicy {
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
        }
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
    use crate::config::{SinkConfig, SinkLimits};

    #[test]
    fn capped_timeouts() {
        let spec = SinkSpec::new(SinkConfig {
            name: "s".into(),
            plugin: "s.wasm".into(),
            config: Default::default(),
            limits: SinkLimits {
                allow_hosts: vec!["http://127.0.0.1".into()],
                connect_timeout: Duration::from_secs(2),
                first_byte_timeout: Duration::from_secs(3),
                ..SinkLimits::default()
            },
            breaker: Default::default(),
        })
        .unwrap();
        let policy = HttpPolicy::new(Arc::from("s"), &spec);
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
