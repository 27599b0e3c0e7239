//! [`CollectorClient`]: sends export requests (OTLP over http/protobuf) to the collector with
//! hyper's pooled client (keep-alive) over plain TCP or rustls with the webpki roots, each
//! request bounded by the export timeout (body read included). A collector that cannot be
//! reached, or answers with an error status, is logged once when it goes and once when it comes
//! back.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tracing::{info, warn};

use crate::config::TraceExport;
use crate::outage::Outage;

/// Largest collector answer read (an OTLP answer is a few bytes; partial-success messages more).
const MAX_ANSWER: usize = 1 << 20;

/// The exporter's HTTP client.
pub(super) struct CollectorClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    endpoint: Uri,
    headers: HeaderMap,
    timeout: Duration,
    outage: Outage,
}

impl CollectorClient {
    /// A client for the collector `traces` names, with its headers and timeout.
    pub(super) fn new(traces: &TraceExport) -> CollectorClient {
        let timeout = traces.timeout;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(timeout));
        tcp.set_nodelay(true);
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map(|builder| builder.with_root_certificates(roots).with_no_client_auth());
        let connector = match tls {
            Ok(tls) => hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .wrap_connector(tcp),
            // ring offers the default protocol versions; this arm is never taken.
            Err(_) => hyper_rustls::HttpsConnectorBuilder::new()
                .with_webpki_roots()
                .https_or_http()
                .enable_http1()
                .wrap_connector(tcp),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let mut headers = HeaderMap::new();
        // The configuration checked every name and value.
        for (name, value) in &traces.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::try_from(value.as_str()),
            ) {
                headers.insert(name, value);
            }
        }
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        CollectorClient {
            client,
            // The configuration checked the URL.
            endpoint: traces.endpoint.parse().unwrap_or_default(),
            headers,
            timeout,
            outage: Outage::default(),
        }
    }

    /// Sends one export request's `body`: `None` when it did not reach the collector or was
    /// refused, else how many of its spans the collector rejected (a partial success).
    pub(super) async fn export(&self, body: Vec<u8>) -> Option<usize> {
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        *request.headers_mut() = self.headers.clone();
        let sent = tokio::time::timeout(self.timeout, async {
            let answer = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let (head, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((head.status, body))
        })
        .await;
        let result = match sent {
            Ok(Ok((status, body))) if status.is_success() => Ok(body),
            Ok(Ok((status, _))) => Err(format!("the collector answered {status}")),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(self.timeout)
            )),
        };
        match result {
            Ok(answer) => {
                self.outage.recovered(|ended| {
                    info!(collector = %self.endpoint, outage = %ended.lasted_text(), failures = ended.failures,
                        "trace collector reachable again; spans are exported");
                });
                let rejected = ExportTraceServiceResponse::decode(answer)
                    .ok()
                    .and_then(|a| a.partial_success)
                    .map_or(0, |p| p.rejected_spans.max(0) as usize);
                Some(rejected)
            }
            Err(error) => {
                self.outage.failed(|| {
                    warn!(collector = %self.endpoint, error = %error,
                        "trace collector unreachable; spans are dropped until it answers (delivery goes on)");
                });
                None
            }
        }
    }
}
