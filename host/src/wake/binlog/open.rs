//! Opening the binlog stream: the [`Target`] a MySQL URL names, the server's current position and
//! the table's `status` column read, and the stream requested with a server id of the host's own
//! ([`open`]); or why it cannot be followed ([`Unavailable`]).

use std::time::Duration;

use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, OptsBuilder, Row};

use super::{HEARTBEAT, Scan};
use crate::store::TableName;

/// Longest wait for the server to answer while opening the stream.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the binlog cannot be followed (the loops probe instead).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// The server writes no binary log.
    #[error("log_bin is OFF")]
    LogBinOff,
    /// The user may not read the binary log's position or stream it.
    #[error("no REPLICATION privilege: {0}")]
    NoPrivilege(String),
    /// Anything else (the server's own message).
    #[error("{0}")]
    Failed(String),
}

/// What the follower follows: the server, and the outbox table's schema and name.
#[derive(Debug, Clone)]
pub struct Target {
    pub(super) opts: Opts,
    pub(super) url: String,
    pub(super) schema: String,
    pub(super) table: String,
}

impl Target {
    /// The target of a `mysql://user:password@host:port/database` URL and `table`.
    pub fn new(url: &str, table: &TableName) -> Result<Target, Unavailable> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Unavailable::Failed(format!("invalid database URL: {e}")))?;
        let decode = |s: &str| {
            percent_decode(s).map_err(|e| Unavailable::Failed(format!("database URL: {e}")))
        };
        let schema = decode(parsed.path().trim_start_matches('/'))?;
        if schema.is_empty() {
            return Err(Unavailable::Failed(
                "the database URL names no database".into(),
            ));
        }
        let socket = parsed
            .query_pairs()
            .find(|(k, _)| k == "socket")
            .map(|(_, v)| v.into_owned());
        let mut builder = OptsBuilder::default()
            .ip_or_hostname(parsed.host_str().unwrap_or("localhost"))
            .tcp_port(parsed.port().unwrap_or(3306))
            .user(Some(decode(parsed.username())?).filter(|u| !u.is_empty()))
            .pass(parsed.password().map(decode).transpose()?)
            .db_name(Some(schema.clone()))
            .prefer_socket(false)
            .tcp_keepalive(Some(Duration::from_secs(30)));
        if socket.is_some() {
            builder = builder.socket(socket);
        }
        Ok(Target {
            opts: builder.into(),
            url: url.to_string(),
            schema,
            table: table.as_str().to_string(),
        })
    }
}

/// `s` with its `%XX` escapes decoded.
fn percent_decode(s: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
}

/// A binlog stream opened at the server's current position.
pub struct Opened {
    pub(super) stream: BinlogStream,
    pub(super) scan: Scan,
}

/// A server id for this host's stream: random (a replica connecting with the id of another one
/// takes its place), away from the small ids servers are usually given.
pub fn server_id() -> u32 {
    let mixed = rand::random::<u32>() ^ std::process::id().rotate_left(13);
    mixed | 0x4000_0000
}

/// Opens the stream: checks `log_bin`, reads the current position, and registers as a replica
/// (which needs `REPLICATION SLAVE`; the position needs `REPLICATION CLIENT`).
pub async fn open(target: &Target, server_id: u32) -> Result<Opened, Unavailable> {
    tokio::time::timeout(OPEN_TIMEOUT, open_inner(target, server_id))
        .await
        .unwrap_or_else(|_| {
            Err(Unavailable::Failed(format!(
                "no answer within {}",
                humantime::format_duration(OPEN_TIMEOUT)
            )))
        })
}

async fn open_inner(target: &Target, server_id: u32) -> Result<Opened, Unavailable> {
    let mut conn = Conn::new(target.opts.clone()).await.map_err(classify)?;
    let log_bin: Option<i64> = conn
        .query_first("SELECT @@log_bin")
        .await
        .map_err(classify)?;
    if log_bin != Some(1) {
        return Err(Unavailable::LogBinOff);
    }
    let (file, pos) = position(&mut conn).await?;
    let status_column = status_column(&mut conn, target).await.map_err(classify)?;
    // Heartbeats while the binlog is quiet (nanoseconds), so a dead connection is noticed.
    conn.query_drop(format!(
        "SET @master_heartbeat_period = {}",
        HEARTBEAT.as_nanos()
    ))
    .await
    .map_err(classify)?;
    let request = BinlogStreamRequest::new(server_id)
        .with_filename(file.as_bytes())
        .with_pos(pos);
    let mut stream = conn.get_binlog_stream(request).await.map_err(classify)?;
    // The server answers at once: a rotate event (and the format description), or an error.
    match stream.next().await {
        Some(Ok(_)) => {}
        Some(Err(e)) => return Err(classify(e)),
        None => return Err(Unavailable::Failed("the server closed the stream".into())),
    }
    Ok(Opened {
        stream,
        scan: Scan::new(target, status_column),
    })
}

/// The binlog's current file and position (`SHOW MASTER STATUS`, or its newer names).
async fn position(conn: &mut Conn) -> Result<(String, u64), Unavailable> {
    let mut last = None;
    for sql in [
        "SHOW MASTER STATUS",
        "SHOW BINARY LOG STATUS",
        "SHOW BINLOG STATUS",
    ] {
        match conn.query_first::<Row, _>(sql).await {
            Ok(Some(row)) => {
                let file: Option<String> = row.get(0);
                let pos: Option<u64> = row.get(1);
                return match (file, pos) {
                    (Some(file), Some(pos)) => Ok((file, pos)),
                    _ => Err(Unavailable::Failed(format!("{sql}: unexpected row"))),
                };
            }
            Ok(None) => return Err(Unavailable::LogBinOff),
            // A syntax error: the server knows the statement by another name.
            Err(mysql_async::Error::Server(e)) if e.code == 1064 => last = Some(e.message),
            Err(e) => return Err(classify(e)),
        }
    }
    Err(Unavailable::Failed(last.unwrap_or_default()))
}

/// The index of the table's `status` column (for the new rows of an update).
pub(super) async fn status_column(
    conn: &mut Conn,
    target: &Target,
) -> mysql_async::Result<Option<usize>> {
    let position: Option<u64> = conn
        .exec_first(
            "SELECT ORDINAL_POSITION FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = 'status'",
            (target.schema.as_str(), target.table.as_str()),
        )
        .await?;
    Ok(position.and_then(|p| usize::try_from(p).ok()?.checked_sub(1)))
}

/// Sorts a driver error: access denied is a missing privilege.
pub(super) fn classify(e: mysql_async::Error) -> Unavailable {
    match e {
        // ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR,
        // ER_MASTER_FATAL_ERROR_READING_BINLOG on a refused dump.
        mysql_async::Error::Server(s) if matches!(s.code, 1227 | 1044 | 1045 | 1142) => {
            Unavailable::NoPrivilege(s.message)
        }
        e => Unavailable::Failed(e.to_string()),
    }
}
