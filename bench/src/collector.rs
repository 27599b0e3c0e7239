//! The `traced` shape's trace collector: an OTLP/HTTP endpoint on loopback that takes every
//! export (reads the whole request, answers 200 with an empty `ExportTraceServiceResponse`) and
//! counts requests and bytes. It decodes nothing, and runs on a thread and runtime of its own: a
//! real collector runs elsewhere, and its cost is not the host's (it still shares the machine's
//! cores).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The running endpoint; stops when dropped.
pub struct Collector {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    /// Ends the collector's thread when sent or dropped.
    stop: Option<oneshot::Sender<()>>,
}

impl Collector {
    /// Listens on a loopback port, served by a thread of its own.
    pub fn start() -> std::io::Result<Collector> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = oneshot::channel();
        // The runtime is built (and dropped) on the thread: a runtime dropped where the caller's
        // runtime runs would panic.
        let (started, ready) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("bench-collector".into())
            .spawn({
                let (requests, bytes) = (requests.clone(), bytes.clone());
                move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    match runtime {
                        Ok(runtime) => {
                            let _ = started.send(Ok(()));
                            runtime.block_on(serve(listener, requests, bytes, stopped));
                        }
                        Err(e) => {
                            let _ = started.send(Err(e));
                        }
                    }
                }
            })?;
        ready
            .recv()
            .map_err(|_| std::io::Error::other("the collector's thread ended as it started"))??;
        Ok(Collector {
            addr,
            requests,
            bytes,
            stop: Some(stop),
        })
    }

    /// The base URL (`[telemetry] endpoint`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Export requests and bytes taken so far.
    pub fn taken(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Takes connections on `listener` until `stopped`, each request counted in `requests` and
/// `bytes`.
async fn serve(
    listener: std::net::TcpListener,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    mut stopped: oneshot::Receiver<()>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => return,
            },
        };
        let (requests, bytes) = (requests.clone(), bytes.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let (requests, bytes) = (requests.clone(), bytes.clone());
                async move {
                    let body = request.into_body().collect().await;
                    let read = body.map(|b| b.to_bytes().len()).unwrap_or(0);
                    requests.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(read as u64, Ordering::Relaxed);
                    let answer = Response::builder()
                        .status(200)
                        .header("content-type", "application/x-protobuf")
                        .body(Full::new(Bytes::new()))
                        .expect("valid response");
                    Ok::<_, Infallible>(answer)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
