//! A TCP proxy a test controls, between outboxd hosts and their database: it forwards bytes both
//! ways until the test drops every connection (a network cut: both ends see the connection close)
//! or stalls them (a network that stops delivering: connections stay open, no byte moves either
//! way until the stall ends, so clients wait on their own timeouts), or holds what clients send
//! (the servers' answers still flow), counting what it holds, so that a cut made then is sure to
//! drop a request in flight.

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
    /// While true, no byte a client sends is forwarded.
    holding: watch::Sender<bool>,
    accepted: AtomicU64,
    /// Chunks a client sent that [`TcpProxy::hold`] held.
    held: AtomicU64,
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
            holding: watch::channel(false).0,
            accepted: AtomicU64::new(0),
            held: AtomicU64::new(0),
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

    /// Holds (`true`) or lets through (`false`) the bytes clients send, on every connection,
    /// open or new; the servers' bytes flow as before.
    pub fn hold(&self, holding: bool) {
        self.state.holding.send_replace(holding);
    }

    /// Chunks of bytes a client sent that [`TcpProxy::hold`] held so far (counted when held). One
    /// held stays held until the hold ends, or is dropped by a cut made before: a request the
    /// server never got, in flight at that cut, which the client must send again.
    pub fn held(&self) -> u64 {
        self.state.held.load(Ordering::Relaxed)
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
    let hold = (state.holding.subscribe(), &state.held);
    let up = pump(
        client_read,
        server_write,
        state.stalled.subscribe(),
        Some(hold),
        cuts.clone(),
    );
    let down = pump(
        server_read,
        client_write,
        state.stalled.subscribe(),
        None,
        cuts.clone(),
    );
    tokio::select! {
        biased;
        _ = cuts.changed() => {}
        _ = up => {}
        _ = down => {}
    }
}

/// Copies `from` → `to`, holding each chunk while the proxy is stalled, and while `hold`'s
/// switch is on (counting the chunk held in its counter). A chunk held across a cut is dropped
/// with its connection, never forwarded: when a cut and the end of a hold come together, the
/// cut wins.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
    mut hold: Option<(watch::Receiver<bool>, &AtomicU64)>,
    cuts: watch::Receiver<u64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some((holding, held)) = &mut hold
            && *holding.borrow_and_update()
        {
            held.fetch_add(1, Ordering::Relaxed);
            while *holding.borrow_and_update() {
                if holding.changed().await.is_err() {
                    return;
                }
            }
        }
        while *stalled.borrow_and_update() {
            if stalled.changed().await.is_err() {
                return;
            }
        }
        if cuts.has_changed().unwrap_or(true) {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
