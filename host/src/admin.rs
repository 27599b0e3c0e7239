//! The admin HTTP listener (`[admin] listen`): `GET /metrics`, `GET /healthz`, `GET /readyz`,
//! `POST /reload` when the host supports reloading, and the operator console at `/` (its pages,
//! `/api/…` and actions: `crate::console`).
//!
//! Plain hyper 1 over HTTP/1.1; one task per connection; stops accepting when the shutdown token
//! is cancelled. Readiness is [`Readiness`]: the database answered the last status refresh and
//! every sink has started.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::console::{Console, ConsoleRequest};
use crate::metrics::{self, Metrics};

pub use crate::readiness::Readiness;
use crate::reload::ReloadFn;

/// What the listener serves.
#[derive(Clone)]
pub struct AdminState {
    /// Encoded on `GET /metrics`.
    pub metrics: Metrics,
    /// Answered on `GET /readyz`.
    pub readiness: Arc<Readiness>,
    /// Run on `POST /reload`; `None`: 404.
    pub reload: Option<ReloadFn>,
    /// The console at `/`; `None` (`[admin] console = false`): its paths are 404.
    pub console: Option<Arc<Console>>,
}

/// A bound admin listener, not yet serving.
pub struct AdminListener {
    listener: TcpListener,
}

/// The listener could not bind. When the port is taken (a second host on the same machine) the
/// message says how to move or turn off the listener.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot listen on admin.listen {addr}: {source}{}",
    in_use_hint(source)
)]
pub struct BindError {
    /// The configured address.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

fn in_use_hint(source: &std::io::Error) -> &'static str {
    if source.kind() == std::io::ErrorKind::AddrInUse {
        " (another outboxd on this machine? give each host its own [admin] listen port, or \"\" to turn the listener off; env OUTBOXD_ADMIN_LISTEN)"
    } else {
        ""
    }
}

impl AdminListener {
    /// Binds `addr` (port 0 picks a free port; see [`AdminListener::local_addr`]).
    pub async fn bind(addr: SocketAddr) -> Result<AdminListener, BindError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BindError { addr, source })?;
        Ok(AdminListener { listener })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` is cancelled (connections in progress finish on their own tasks).
    pub async fn serve(self, state: AdminState, shutdown: CancellationToken) {
        if let Ok(addr) = self.listener.local_addr() {
            info!(%addr, console = state.console.is_some(), "admin listener serving /metrics, /healthz, /readyz and the console at /");
        }
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "admin listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(respond(&state, request, peer).await) }
                });
                if let Err(error) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    debug!(%error, "admin connection ended with an error");
                }
            });
        }
    }
}

/// Answers one request from `peer`.
async fn respond(
    state: &AdminState,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    if let Some(console) = &state.console
        && Console::owns(request.uri().path())
    {
        let (parts, body) = request.into_parts();
        let limited = http_body_util::Limited::new(body, crate::console::request::MAX_FORM_BYTES);
        let body = match http_body_util::BodyExt::collect(limited).await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the form is too large\n".into(),
                );
            }
        };
        let request = ConsoleRequest::new(parts.method, &parts.uri, &parts.headers, &body, peer);
        return console
            .handle(&request)
            .await
            .unwrap_or_else(|| text(StatusCode::NOT_FOUND, "not found\n".into()));
    }
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            metrics::CONTENT_TYPE,
            state.metrics.encode(),
        ),
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
        (&Method::GET, "/readyz") => {
            let wake = state
                .readiness
                .wake()
                .map(|wake| format!("wake: {wake}\n"))
                .unwrap_or_default();
            match state.readiness.check() {
                Ok(()) => text(StatusCode::OK, format!("ready\n{wake}")),
                Err(reason) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {reason}\n{wake}"),
                ),
            }
        }
        (&Method::POST, "/reload") => match &state.reload {
            Some(reload) => match reload().await {
                Ok(summary) => text(StatusCode::OK, format!("{summary}\n")),
                Err(reason) => text(StatusCode::CONFLICT, format!("reload refused: {reason}\n")),
            },
            None => text(
                StatusCode::NOT_FOUND,
                "reload is not available here\n".into(),
            ),
        },
        (_, "/metrics" | "/healthz" | "/readyz" | "/reload") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz, /readyz, and the console at /\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body)
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_port_is_named_with_the_way_out() {
        let first = AdminListener::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = first.local_addr().unwrap();
        let error = AdminListener::bind(addr).await.err().expect("port taken");
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("cannot listen on admin.listen {addr}: ")),
            "{message}"
        );
        assert!(message.contains("[admin] listen"), "{message}");
    }
}
