//! MySQL / MariaDB commit feed: the host follows the server's binary log as a replica would
//! (`mysql_async`'s binlog stream on a connection of its own, with a server id of its own), and a
//! committed transaction that wrote the outbox table wakes a loop at once.
//!
//! Only committed transactions reach the binlog, so a rolled-back one wakes no one. Within a
//! transaction the follower looks for a `TABLE_MAP` of the configured table followed by a
//! `WRITE_ROWS` (an insert) or an `UPDATE_ROWS` whose new row is `pending` (a requeue; the
//! hosts' own claims and marks wake no one), and wakes at its `XID` (commit). With a statement
//! or mixed binlog format a statement naming the table stands for the rows.
//!
//! The binlog is a wake-up signal only: claims still read the table, so a missed or duplicated
//! event costs at most one probe. The follower starts at the server's current position (never
//! replays history), wakes once after every (re)connect since commits made while it was away sent
//! nothing, and wakes a second time [`RECHECK`] after the last commit it saw: the server writes a
//! transaction to the binlog just before its storage engine makes it visible, so a claim racing
//! the first wake may still miss it. While commits come faster than one per [`MIN_WAKE_GAP`] it
//! wakes once per gap, not once per commit.
//!
//! The server sends a heartbeat every [`HEARTBEAT`] while the binlog is quiet; a stream silent
//! for [`SILENCE`] is taken as lost. The follower reconnects on its own (backing off up to
//! [`MAX_RECONNECT_WAIT`]); while it is down the loops probe ([`super::IdleBackoff`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, OptsBuilder, Row, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Wake;
use crate::store::{TableName, redact_url};

/// Longest wait between two reconnect attempts.
pub const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// The second wake after a commit: a claim woken by the first may have run before the commit
/// was visible.
pub const RECHECK: Duration = Duration::from_millis(10);

/// How often the server sends a heartbeat while the binlog is quiet.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// A stream with no event (not even a heartbeat) for this long is lost.
pub const SILENCE: Duration = Duration::from_secs(5);

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
    opts: Opts,
    url: String,
    schema: String,
    table: String,
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
    stream: BinlogStream,
    scan: Scan,
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
async fn status_column(conn: &mut Conn, target: &Target) -> mysql_async::Result<Option<usize>> {
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
fn classify(e: mysql_async::Error) -> Unavailable {
    match e {
        // ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR,
        // ER_MASTER_FATAL_ERROR_READING_BINLOG on a refused dump.
        mysql_async::Error::Server(s) if matches!(s.code, 1227 | 1044 | 1045 | 1142) => {
            Unavailable::NoPrivilege(s.message)
        }
        e => Unavailable::Failed(e.to_string()),
    }
}

/// Follows a stream's events and decides which commits wake the loops.
struct Scan {
    schema: String,
    table: String,
    status_column: Option<usize>,
    /// Table ids the server gave the outbox table (a new one after each schema change).
    ours: HashSet<u64>,
    /// Inside a transaction (after its `BEGIN`).
    in_transaction: bool,
    /// The current transaction wrote a row the loops should claim.
    touched: bool,
}

impl Scan {
    fn new(target: &Target, status_column: Option<usize>) -> Scan {
        Scan {
            schema: target.schema.clone(),
            table: target.table.to_ascii_lowercase(),
            status_column,
            ours: HashSet::new(),
            in_transaction: false,
            touched: false,
        }
    }

    /// Takes one event; `true` when it commits a transaction that wrote claimable rows.
    fn commit_wakes(&mut self, event: &Event, stream: &BinlogStream) -> bool {
        let data = match event.read_data() {
            Ok(Some(data)) => data,
            // An event type this client does not know (MariaDB's own ones): nothing to see.
            Ok(None) => return false,
            // An event it cannot read: wake at the commit rather than miss a row.
            Err(_) => {
                self.touched = true;
                return false;
            }
        };
        match data {
            EventData::TableMapEvent(map)
                if map.database_name() == self.schema
                    && map.table_name().eq_ignore_ascii_case(&self.table) =>
            {
                self.ours.insert(map.table_id());
            }
            EventData::RowsEvent(rows) if self.ours.contains(&rows.table_id()) => {
                self.touched |= self.rows_wake(&rows, stream);
            }
            EventData::QueryEvent(query) => {
                let text = query.query();
                let statement = text.trim();
                if statement.eq_ignore_ascii_case("BEGIN") {
                    self.in_transaction = true;
                    self.touched = false;
                } else if statement.eq_ignore_ascii_case("COMMIT") {
                    self.in_transaction = false;
                    return std::mem::take(&mut self.touched);
                } else if statement.to_ascii_lowercase().contains(&self.table) {
                    // A statement-format write: the statement stands for its rows (outside a
                    // transaction, e.g. DDL, it commits itself).
                    self.touched = true;
                    if !self.in_transaction {
                        return std::mem::take(&mut self.touched);
                    }
                }
            }
            EventData::XidEvent(_) => {
                self.in_transaction = false;
                return std::mem::take(&mut self.touched);
            }
            _ => {}
        }
        false
    }

    /// Whether a rows event of the outbox table writes a row the loops should claim: any insert;
    /// an update whose new row is `pending` (a requeue), not the hosts' own claims and marks.
    fn rows_wake(&self, rows: &RowsEventData<'_>, stream: &BinlogStream) -> bool {
        match rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => true,
            RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => {
                let (Some(column), Some(map)) =
                    (self.status_column, stream.get_tme(rows.table_id()))
                else {
                    return true;
                };
                rows.rows(map).any(|row| match row {
                    Ok((_, Some(after))) if after.len() == map.columns_count() as usize => {
                        match after.as_ref(column) {
                            Some(mysql_async::binlog::value::BinlogValue::Value(Value::Bytes(
                                status,
                            ))) => status == b"pending",
                            _ => true,
                        }
                    }
                    // A partial image or an unreadable row: wake rather than miss one.
                    _ => true,
                })
            }
            _ => false,
        }
    }
}

/// Spawns the follower over a stream already `opened` (reconnecting with `server_id` after a
/// loss); it runs until `shutdown`.
pub fn spawn_follower(
    target: Target,
    server_id: u32,
    opened: Opened,
    wake: Wake,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = follow_forever(&target, server_id, opened, &wake) => {}
        }
        wake.set_commit_feed(false);
    })
}

/// Follows the stream; reopens it after any loss.
async fn follow_forever(target: &Target, server_id: u32, opened: Opened, wake: &Wake) {
    let database = redact_url(&target.url);
    let mut opened = Some(opened);
    let mut reconnect_wait = Duration::from_millis(100);
    loop {
        let current = match opened.take() {
            Some(current) => Ok(current),
            None => open(target, server_id).await,
        };
        match current {
            Ok(current) => {
                info!(database = %database, server_id, "commit feed following the binlog");
                wake.set_commit_feed(true);
                // Rows committed while no one followed have no event coming.
                wake.wake();
                let lost = follow(current, wake).await;
                reconnect_wait = Duration::from_millis(100);
                warn!(database = %database, error = %lost,
                    "commit feed lost the binlog stream; reconnecting");
            }
            Err(err) => {
                warn!(database = %database, error = %err, retry_in = ?reconnect_wait,
                    "commit feed cannot follow the binlog; probing until it reconnects");
            }
        }
        wake.set_commit_feed(false);
        tokio::time::sleep(reconnect_wait).await;
        reconnect_wait = (reconnect_wait * 2).min(MAX_RECONNECT_WAIT);
    }
}

/// One stream's life: returns why it ended.
async fn follow(opened: Opened, wake: &Wake) -> String {
    let Opened {
        mut stream,
        mut scan,
    } = opened;
    let mut pacer = Pacer::default();
    loop {
        let due = pacer.due();
        tokio::select! {
            next = tokio::time::timeout(SILENCE, stream.next()) => {
                let event = match next {
                    Err(_) => return format!("no event or heartbeat for {}", humantime::format_duration(SILENCE)),
                    Ok(None) => return "the server ended the stream".into(),
                    Ok(Some(Err(e))) => return e.to_string(),
                    Ok(Some(Ok(event))) => event,
                };
                if scan.commit_wakes(&event, &stream) && pacer.commit(Instant::now()) {
                    wake.wake();
                }
            }
            _ = sleep_until(due), if due.is_some() => {
                pacer.fired(Instant::now());
                wake.wake();
            }
        }
    }
}

/// When the commits seen wake the loops: the first at once, then at most one every
/// [`MIN_WAKE_GAP`] (commits in between are owed one wake at the end of the gap), and one more
/// [`RECHECK`] after the last.
///
/// While rows arrive faster than that, the loops claim every few milliseconds, as a probe would,
/// instead of once per commit: each claim finds more rows and producers meet fewer claims.
#[derive(Debug, Default)]
struct Pacer {
    last_wake: Option<Instant>,
    /// A commit came within the gap: wake at its end.
    owed: bool,
    /// The second look after the last wake.
    recheck: Option<Instant>,
}

/// Shortest time between two wakes of one binlog follower (the probe's own minimum).
pub const MIN_WAKE_GAP: Duration = super::PROBE_MIN;

impl Pacer {
    /// A commit that wakes the loops seen at `now`: whether to wake them now.
    fn commit(&mut self, now: Instant) -> bool {
        match self.last_wake {
            Some(last) if now < last + MIN_WAKE_GAP => {
                self.owed = true;
                false
            }
            _ => {
                self.woke(now);
                true
            }
        }
    }

    /// When the next owed wake or recheck is due.
    fn due(&self) -> Option<Instant> {
        match (self.owed, self.last_wake) {
            (true, Some(last)) => Some(last + MIN_WAKE_GAP),
            _ => self.recheck,
        }
    }

    /// The wake [`Pacer::due`] asked for was given at `now`.
    fn fired(&mut self, now: Instant) {
        if std::mem::take(&mut self.owed) {
            self.woke(now);
        } else {
            self.recheck = None;
            self.last_wake = Some(now);
        }
    }

    fn woke(&mut self, now: Instant) {
        self.last_wake = Some(now);
        self.recheck = Some(now + RECHECK);
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_reads_the_url() {
        let table = TableName::new("room_outbox").unwrap();
        let target = Target::new("mysql://us%40er:p%2Fw@127.0.0.1:3307/outbox_db", &table).unwrap();
        assert_eq!(target.schema, "outbox_db");
        assert_eq!(target.opts.user(), Some("us@er"));
        assert_eq!(target.opts.pass(), Some("p/w"));
        assert_eq!(target.opts.tcp_port(), 3307);
        assert!(Target::new("mysql://root@127.0.0.1:3306", &table).is_err());
    }

    #[test]
    fn the_pacer_wakes_at_once_then_at_most_every_gap_and_rechecks() {
        let t0 = Instant::now();
        let mut pacer = Pacer::default();
        assert_eq!(pacer.due(), None);
        assert!(pacer.commit(t0), "a quiet table's commit wakes at once");
        assert_eq!(pacer.due(), Some(t0 + RECHECK));
        // Commits within the gap are owed one wake at its end.
        assert!(!pacer.commit(t0 + Duration::from_millis(1)));
        assert!(!pacer.commit(t0 + Duration::from_millis(2)));
        assert_eq!(pacer.due(), Some(t0 + MIN_WAKE_GAP));
        pacer.fired(t0 + MIN_WAKE_GAP);
        assert_eq!(pacer.due(), Some(t0 + MIN_WAKE_GAP + RECHECK));
        pacer.fired(t0 + MIN_WAKE_GAP + RECHECK);
        assert_eq!(pacer.due(), None, "one recheck, then quiet");
        // A commit long after wakes at once again.
        assert!(pacer.commit(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn server_ids_differ_and_stay_away_from_small_ones() {
        let (a, b) = (server_id(), server_id());
        assert_ne!(a, b);
        assert!(a >= 0x4000_0000 && b >= 0x4000_0000);
    }
}
