//! Sending one outbound request of a sink to an address it may reach.
//!
//! The allowlist (`limits.allow_hosts`) names origins; a name is only as good as what it resolves
//! to, and a name its owner re-points at `127.0.0.1`, `10.0.0.5` or the cloud metadata address
//! `169.254.169.254` (DNS rebinding) would reach inside the network. So the host resolves the name
//! itself, checks every address ([`AddressRule`]), and connects to a checked address directly,
//! with no second lookup between the check and the connect. Internal addresses (loopback,
//! private, link-local, carrier-grade NAT, unspecified, multicast, broadcast, and the IPv6 forms
//! of these) are refused unless the allowlist names that IP literal or the sink sets
//! `limits.allow_private_addresses = true`. TLS is verified against the name, as before.
//!
//! The rest is the standard wasi:http client (`wasmtime_wasi_http::default_send_request`): an
//! HTTP/1.1 connection per request, the connect, first-byte and between-bytes timeouts, and no
//! redirect followed.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http::{Request, Response};
use http_body::Body;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::{Error, RequestOptions};

/// Which resolved addresses a sink may connect to.
#[derive(Debug, Clone, Default)]
pub struct AddressRule {
    /// `limits.allow_private_addresses`: internal addresses too.
    pub allow_private: bool,
    /// IP literals the allowlist names: reachable even when internal.
    pub literals: Vec<IpAddr>,
}

impl AddressRule {
    /// Whether a connection to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        self.allow_private || !is_internal(ip) || self.literals.contains(&canonical(ip))
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is an address inside a network rather than on the internet: loopback, private
/// (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16 with the metadata address,
/// fe80::/10), carrier-grade NAT (100.64/10), unspecified, broadcast, multicast, the IETF
/// protocol block (192.0.0/24) and the benchmarking range (198.18/15).
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b))
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || ip.to_ipv4().is_some_and(|v4| is_internal_v4(v4) && first == 0) // IPv4-compatible
}

/// A request refused by the [`AddressRule`]: the host name and the first address refused.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The host as the request names it.
    pub host: String,
    /// An address it resolved to that is internal.
    pub address: IpAddr,
}

/// Something that is a TLS or plain TCP stream.
trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T> Stream for T where T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}

/// What [`send`] returns: the response, and the connection's I/O driver.
pub type SentRequest = (
    Response<ResponseBody>,
    Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>,
);

/// Sends `request` as the standard wasi:http client does, connecting only to an address `rule`
/// permits. `Err((error, Some(refused)))` when the name resolved to internal addresses only.
pub async fn send(
    mut request: Request<impl Body<Data = Bytes, Error = Error> + Send + 'static>,
    options: RequestOptions,
    rule: &AddressRule,
) -> Result<SentRequest, (Error, Option<Refused>)> {
    let uri = request.uri();
    let authority = uri
        .authority()
        .ok_or((Error::HttpRequestUriInvalid, None))?;
    let use_tls = uri.scheme() == Some(&Scheme::HTTPS);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority
        .port_u16()
        .unwrap_or(if use_tls { 443 } else { 80 });
    let forever = Duration::from_secs(600);
    let connect_timeout = options.connect_timeout.unwrap_or(forever);
    let first_byte_timeout = options.first_byte_timeout.unwrap_or(forever);
    let between_bytes_timeout = options.between_bytes_timeout.unwrap_or(forever);

    let tcp = tokio::time::timeout(connect_timeout, connect(&host, port, rule))
        .await
        .map_err(|_| (Error::ConnectionTimeout, None))??;
    let stream: Box<dyn Stream> = if use_tls {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = server_name(&host).map_err(|e| (Error::from(e), None))?;
        let tls = tokio::time::timeout(connect_timeout, connector.connect(name, tcp))
            .await
            .map_err(|_| (Error::ConnectionTimeout, None))?
            .map_err(|e| (Error::Tls(e), None))?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| (Error::ConnectionTimeout, None))?
    .map_err(|e| (Error::from(e), None))?;

    // The request line carries the path only (scheme and authority are for proxies).
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(
            request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string(),
        )
        .build()
        .map_err(|_| (Error::HttpRequestUriInvalid, None))?;

    let send = async move {
        let response = tokio::time::timeout(first_byte_timeout, sender.send_request(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?
            .map_err(Error::from)?;
        // A zero interval panics in tokio: 1 ns is as good as zero.
        let gap = between_bytes_timeout.max(Duration::from_nanos(1));
        let mut timeout = tokio::time::interval(gap);
        timeout.reset();
        Ok::<_, Error>(response.map(|incoming| ResponseBody { incoming, timeout }))
    };
    let mut send = pin!(send);
    let mut conn = Some(conn);
    // Wait for the response while driving the connection's I/O.
    let response = std::future::poll_fn(|cx| match send.as_mut().poll(cx) {
        Poll::Ready(result) => Poll::Ready(result),
        Poll::Pending => {
            let Some(driver) = conn.as_mut() else {
                return Poll::Pending;
            };
            let done = ready!(Pin::new(driver).poll(cx));
            conn = None;
            match done {
                Ok(()) => send.as_mut().poll(cx),
                Err(e) => Poll::Ready(Err(Error::from(e))),
            }
        }
    })
    .await
    .map_err(|e| (e, None))?;
    let driver = async move {
        let Some(conn) = conn.take() else {
            return Ok(());
        };
        conn.await.map_err(|e| {
            if e.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(e)
            }
        })
    };
    Ok((response, Box::pin(driver)))
}

/// Resolves `host` (an IP literal stands for itself) and connects to the first address `rule`
/// permits that answers.
async fn connect(
    host: &str,
    port: u16,
    rule: &AddressRule,
) -> Result<TcpStream, (Error, Option<Refused>)> {
    let addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| {
                let error = Error::DnsError {
                    rcode: Some(e.to_string()),
                    info_code: None,
                };
                (error, None)
            })?
            .collect(),
    };
    let (permitted, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = addresses
        .into_iter()
        .partition(|address| rule.permits(address.ip()));
    if permitted.is_empty() {
        return Err(match refused.first() {
            Some(address) => (
                Error::DestinationIpProhibited,
                Some(Refused {
                    host: host.to_string(),
                    address: address.ip(),
                }),
            ),
            None => (Error::DestinationNotFound, None),
        });
    }
    let mut last = None;
    for address in permitted {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    let error = last.expect("at least one address was tried");
    Err((
        match error.kind() {
            std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
            _ => Error::Connect(error),
        },
        None,
    ))
}

/// The name TLS verifies the certificate against: the host name, or an IP literal.
fn server_name(
    host: &str,
) -> Result<rustls::pki_types::ServerName<'static>, rustls::pki_types::InvalidDnsNameError> {
    use rustls::pki_types::ServerName;
    match host.parse::<IpAddr>() {
        Ok(ip) => Ok(ServerName::from(ip)),
        Err(_) => Ok(ServerName::try_from(host)?.to_owned()),
    }
}

/// A response body that fails when no byte arrives for the between-bytes timeout.
pub struct ResponseBody {
    incoming: hyper::body::Incoming,
    timeout: tokio::time::Interval,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(e)
            }))),
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_addresses() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_internal(ip(internal)), "{internal}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_internal(ip(public)), "{public}");
        }
    }

    #[test]
    fn the_rule_lets_through_named_literals_and_everything_when_private_is_allowed() {
        let strict = AddressRule::default();
        assert!(!strict.permits(ip("127.0.0.1")));
        assert!(strict.permits(ip("8.8.8.8")));
        let literal = AddressRule {
            allow_private: false,
            literals: vec![ip("127.0.0.1")],
        };
        assert!(literal.permits(ip("127.0.0.1")));
        assert!(literal.permits(ip("::ffff:127.0.0.1")));
        assert!(!literal.permits(ip("127.0.0.2")));
        let open = AddressRule {
            allow_private: true,
            literals: Vec::new(),
        };
        assert!(open.permits(ip("169.254.169.254")));
    }
}
