//! [`CollectorClient`]: the HTTP client the OTLP exporter sends its requests with: hyper's
//! pooled client (keep-alive) over plain TCP or rustls with the webpki roots, on the host's
//! Tokio runtime, each request bounded by the export timeout (body read included). A collector
//! that cannot be reached, or answers with an error status, is logged once when it goes and once
//! when it comes back.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError};
use tracing::{info, warn};

use crate::outage::Outage;

/// Deadline of one export request when none is configured (the OTLP default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest collector answer read (an OTLP answer is a few bytes; partial-success messages more).
const MAX_ANSWER: usize = 1 << 20;

/// The exporter's HTTP client.
pub(super) struct CollectorClient {
    runtime: tokio::runtime::Handle,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    outage: std::sync::Arc<Outage>,
}

impl std::fmt::Debug for CollectorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectorClient")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl CollectorClient {
    /// A client sending on `runtime`, each request within `timeout` (default 10 s, or
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` in milliseconds).
    pub(super) fn new(
        runtime: tokio::runtime::Handle,
        timeout: Option<Duration>,
    ) -> CollectorClient {
        let timeout = timeout
            .or_else(|| {
                [
                    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                    "OTEL_EXPORTER_OTLP_TIMEOUT",
                ]
                .iter()
                .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
                .map(Duration::from_millis)
            })
            .unwrap_or(DEFAULT_TIMEOUT);
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
        CollectorClient {
            runtime,
            client,
            timeout,
            outage: Default::default(),
        }
    }
}

#[async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let timeout = self.timeout;
        let target = request.uri().to_string();
        // Called from the SDK's export thread (no runtime there): the request runs on the host's.
        let sent = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, async move {
                let answer = client.request(request.map(Full::new)).await?;
                let (head, body) = answer.into_parts();
                let body = Limited::new(body, MAX_ANSWER)
                    .collect()
                    .await
                    .map_err(|e| -> HttpError { e })?
                    .to_bytes();
                Ok::<_, HttpError>(Response::from_parts(head, body))
            })
            .await
        });
        let result = match sent.await {
            Ok(Ok(Ok(answer))) if answer.status().is_success() => Ok(answer),
            Ok(Ok(Ok(answer))) => Err(format!("the collector answered {}", answer.status())),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(_)) => Err(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            )),
            Err(e) => Err(format!("the runtime stopped: {e}")),
        };
        match result {
            Ok(answer) => {
                self.outage.recovered(|ended| {
                    info!(collector = %target, outage = %ended.lasted_text(), failures = ended.failures,
                        "trace collector reachable again; spans are exported");
                });
                Ok(answer)
            }
            Err(error) => {
                self.outage.failed(|| {
                    warn!(collector = %target, error = %error,
                        "trace collector unreachable; spans are dropped until it answers (delivery goes on)");
                });
                Err(error.into())
            }
        }
    }
}
