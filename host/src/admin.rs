//! The admin HTTP listener (`[admin] listen`): `GET /metrics`, `GET /healthz`, `GET /readyz`,
//! and `POST /reload` when the host supports reloading.
//!
//! Plain hyper 1 over HTTP/1.1; one task per connection; stops accepting when the shutdown token
//! is cancelled. Readiness is [`Readiness`]: the database answered the last status refresh,
//! every sink has started and every `[[broker]]` connection is up.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::{self, Metrics};

/// Whether this host can serve: the database answers and every sink has started.
#[derive(Debug, Default)]
pub struct Readiness {
    sinks_started: AtomicBool,
    /// `None` before the first refresh; `Some(Err(reason))` while the database fails.
    database: Mutex<Option<Result<(), String>>>,
    /// What wakes idle loops, for the `/readyz` body (not a condition of readiness: loops probe
    /// while a feed is down).
    wake: Mutex<Option<String>>,
    /// The `[[broker]]` connections that are down, each as `broker `NAME` (KIND): REASON`.
    brokers_down: Mutex<Vec<String>>,
}

impl Readiness {
    /// A readiness with nothing checked yet (not ready).
    pub fn new() -> Arc<Readiness> {
        Arc::new(Readiness::default())
    }

    /// Records that every sink has started (or, `false`, that the sinks are being replaced).
    pub fn set_sinks_started(&self, started: bool) {
        self.sinks_started.store(started, Ordering::SeqCst);
    }

    /// Records the outcome of the latest database check.
    pub fn set_database(&self, outcome: Result<(), String>) {
        if let Ok(mut database) = self.database.lock() {
            *database = Some(outcome);
        }
    }

    /// Records what wakes idle loops and whether its feed is connected, e.g.
    /// `binlog (connected)` or `probe (log_bin is OFF)`.
    pub fn set_wake(&self, wake: String) {
        if let Ok(mut slot) = self.wake.lock() {
            *slot = Some(wake);
        }
    }

    /// Records which `[[broker]]` connections are down (empty: all connected).
    pub fn set_brokers_down(&self, down: Vec<String>) {
        if let Ok(mut slot) = self.brokers_down.lock() {
            *slot = down;
        }
    }

    /// What wakes idle loops, as last recorded.
    pub fn wake(&self) -> Option<String> {
        self.wake.lock().ok().and_then(|w| w.clone())
    }

    /// `Ok` when ready, else the reason (for the 503 body).
    pub fn check(&self) -> Result<(), String> {
        let database = self
            .database
            .lock()
            .map(|d| d.clone())
            .unwrap_or_else(|_| Some(Err("readiness state poisoned".into())));
        match database {
            None => return Err("database not checked yet".into()),
            Some(Err(reason)) => return Err(format!("database unreachable: {reason}")),
            Some(Ok(())) => {}
        }
        if !self.sinks_started.load(Ordering::SeqCst) {
            return Err("sinks not started".into());
        }
        let down = self
            .brokers_down
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        if !down.is_empty() {
            return Err(format!("not connected: {}", down.join("; ")));
        }
        Ok(())
    }
}

/// What `POST /reload` runs: `Ok(summary)` when the new set is serving, `Err(reason)` when it was
/// refused (the running set keeps serving).
pub type ReloadFn = Arc<dyn Fn() -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// What the listener serves.
#[derive(Clone)]
pub struct AdminState {
    /// Encoded on `GET /metrics`.
    pub metrics: Metrics,
    /// Answered on `GET /readyz`.
    pub readiness: Arc<Readiness>,
    /// Run on `POST /reload`; `None`: 404.
    pub reload: Option<ReloadFn>,
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
            info!(%addr, "admin listener serving /metrics, /healthz, /readyz");
        }
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _peer)) => stream,
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
                    async move { Ok::<_, Infallible>(respond(&state, request).await) }
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

/// Answers one request.
async fn respond(state: &AdminState, request: Request<Incoming>) -> Response<Full<Bytes>> {
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
            "not found: try /metrics, /healthz, /readyz\n".into(),
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

    #[test]
    fn readiness_needs_database_and_sinks() {
        let readiness = Readiness::new();
        assert_eq!(readiness.check().unwrap_err(), "database not checked yet");
        readiness.set_database(Ok(()));
        assert_eq!(readiness.check().unwrap_err(), "sinks not started");
        readiness.set_sinks_started(true);
        assert!(readiness.check().is_ok());
        readiness.set_database(Err("connection refused".into()));
        assert_eq!(
            readiness.check().unwrap_err(),
            "database unreachable: connection refused"
        );
    }
}
