//! A TCP proxy a test controls, between outboxd hosts and their database: it forwards bytes both
//! ways until the test drops every connection (a network cut: both ends see the connection close)
//! or stalls them (a network that stops delivering: connections stay open, no byte moves either
//! way until the stall ends, so clients wait on their own timeouts).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; it stops accepting when dropped (open connections end at the next cut).
pub struct TcpProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

struct State {
    /// Bumped by [`TcpProxy::cut`]: every connection opened before ends.
    cuts: watch::Sender<u64>,
    /// While true, no byte is forwarded.
    stalled: watch::Sender<bool>,
    accepted: AtomicU64,
}

impl TcpProxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            cuts: watch::channel(0).0,
            stalled: watch::channel(false).0,
            accepted: AtomicU64::new(0),
        });
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    state.accepted.fetch_add(1, Ordering::Relaxed);
                    let state = state.clone();
                    tokio::spawn(async move {
                        // An upstream that refuses (the database is down) closes the client.
                        if let Ok(server) = TcpStream::connect(upstream).await {
                            forward(client, server, &state).await;
                        }
                    });
                }
            }
        });
        TcpProxy {
            addr,
            state,
            accept,
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Closes every open connection (both sides); new ones are accepted as before.
    pub fn cut(&self) {
        self.state.cuts.send_modify(|cuts| *cuts += 1);
    }

    /// Stops (`true`) or resumes (`false`) forwarding on every connection, open or new.
    pub fn stall(&self, stalled: bool) {
        self.state.stalled.send_replace(stalled);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Forwards both ways until either side closes or the proxy cuts the connection.
async fn forward(client: TcpStream, server: TcpStream, state: &State) {
    let mut cuts = state.cuts.subscribe();
    cuts.mark_unchanged();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, state.stalled.subscribe());
    let down = pump(server_read, client_write, state.stalled.subscribe());
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cuts.changed() => {}
    }
}

/// Copies `from` → `to`, holding each chunk while the proxy is stalled.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while *stalled.borrow_and_update() {
            if stalled.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
