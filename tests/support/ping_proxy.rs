//! A TCP proxy in front of a database server that counts the pings its clients send: sqlx's
//! `Connection::ping`, a PostgreSQL `Sync` on its own (answered by `ReadyForQuery`) or a MySQL
//! `COM_PING` packet. Every byte is forwarded unchanged; the client→server stream is parsed only
//! to count. TLS would hide the messages, so the proxied URL turns it off.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which wire protocol the proxied server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// PostgreSQL: a startup message, then messages of a type byte and an i32 length.
    Postgres,
    /// MySQL / MariaDB: packets of a 3-byte length and a sequence byte.
    MySql,
}

/// A running proxy: [`PingProxy::url`] reaches the server through it.
pub struct PingProxy {
    /// The server's URL with the proxy's address, TLS off.
    pub url: String,
    pings: Arc<AtomicUsize>,
    statements: Arc<AtomicUsize>,
}

impl PingProxy {
    /// Starts a proxy to the server of `url` (`scheme://user@host:port/db…`).
    pub async fn start(url: &str, wire: Wire) -> PingProxy {
        let (scheme, rest) = url.split_once("://").expect("URL has a scheme");
        let (userinfo, after) = rest.rsplit_once('@').expect("URL names a user");
        let (authority, tail) = after.split_at(after.find('/').unwrap_or(after.len()));
        let server = authority.to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let tls_off = match wire {
            Wire::Postgres => "sslmode=disable",
            Wire::MySql => "ssl-mode=disabled",
        };
        let joiner = if tail.contains('?') { '&' } else { '?' };
        let proxied = format!("{scheme}://{userinfo}@127.0.0.1:{port}{tail}{joiner}{tls_off}");
        let pings = Arc::new(AtomicUsize::new(0));
        let statements = Arc::new(AtomicUsize::new(0));
        let counters = (pings.clone(), statements.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&server).await.expect("reach the server");
                tokio::spawn(relay(client, server, wire, counters.clone()));
            }
        });
        PingProxy {
            url: proxied,
            pings,
            statements,
        }
    }

    /// Pings sent so far, over every connection.
    pub fn pings(&self) -> usize {
        self.pings.load(Ordering::SeqCst)
    }

    /// Statements sent so far: PostgreSQL extended-protocol executions and simple queries,
    /// MySQL `COM_QUERY` / `COM_STMT_EXECUTE` packets.
    pub fn statements(&self) -> usize {
        self.statements.load(Ordering::SeqCst)
    }
}

/// Forwards both ways; counts what the client sends.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    wire: Wire,
    (pings, statements): (Arc<AtomicUsize>, Arc<AtomicUsize>),
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut parser = Parser::new(wire);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for counted in parser.feed(&buf[..n]) {
            match counted {
                Counted::Ping => pings.fetch_add(1, Ordering::SeqCst),
                Counted::Statement => statements.fetch_add(1, Ordering::SeqCst),
            };
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    back.abort();
}

/// What one client message was, when it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Ping,
    Statement,
}

/// Splits the client's byte stream into messages.
struct Parser {
    wire: Wire,
    pending: Vec<u8>,
    /// PostgreSQL: the startup message (no type byte) is still to come.
    startup: bool,
    /// PostgreSQL: the type of the client's previous message (a `Sync` after `Execute` ends a
    /// statement; one after a `Sync`, a simple query or the startup is a ping).
    previous: u8,
}

impl Parser {
    fn new(wire: Wire) -> Parser {
        Parser {
            wire,
            pending: Vec::new(),
            startup: true,
            previous: 0,
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> Vec<Counted> {
        self.pending.extend_from_slice(bytes);
        let mut counted = Vec::new();
        loop {
            let Some((length, kind)) = self.next_message() else {
                break;
            };
            let message: Vec<u8> = self.pending.drain(..length).collect();
            match self.wire {
                Wire::Postgres => {
                    if let Some(kind) = kind {
                        match kind {
                            b'S' if !matches!(
                                self.previous,
                                b'P' | b'B' | b'D' | b'E' | b'C' | b'H'
                            ) =>
                            {
                                counted.push(Counted::Ping)
                            }
                            b'E' | b'Q' => counted.push(Counted::Statement),
                            _ => {}
                        }
                        self.previous = kind;
                    }
                }
                // A command starts a new exchange (sequence 0); the handshake response does not.
                Wire::MySql if message[3] != 0 => {}
                Wire::MySql => match message.get(4) {
                    Some(0x0e) if message.len() == 5 => counted.push(Counted::Ping),
                    Some(0x03 | 0x17) => counted.push(Counted::Statement),
                    _ => {}
                },
            }
        }
        counted
    }

    /// The length of the next whole message in `pending` and its PostgreSQL type byte.
    fn next_message(&mut self) -> Option<(usize, Option<u8>)> {
        let p = &self.pending;
        match self.wire {
            Wire::Postgres if self.startup => {
                let length = u32::from_be_bytes(p.get(..4)?.try_into().ok()?) as usize;
                (p.len() >= length).then(|| {
                    self.startup = false;
                    (length, None)
                })
            }
            Wire::Postgres => {
                let length = 1 + u32::from_be_bytes(p.get(1..5)?.try_into().ok()?) as usize;
                (p.len() >= length).then_some((length, Some(p[0])))
            }
            Wire::MySql => {
                let header = p.get(..4)?;
                let length = 4
                    + (header[0] as usize | (header[1] as usize) << 8 | (header[2] as usize) << 16);
                (p.len() >= length).then_some((length, None))
            }
        }
    }
}
