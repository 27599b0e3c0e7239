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
//! [`MAX_RECONNECT_WAIT`](super::MAX_RECONNECT_WAIT)); while it is down the loops probe
//! ([`super::IdleBackoff`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::{BinlogStream, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod open;

use super::Wake;
use crate::outage::Outage;
use crate::store::redact_url;

pub use open::{Opened, Target, Unavailable, open, server_id};

/// The second wake after a commit: a claim woken by the first may have run before the commit
/// was visible.
pub const RECHECK: Duration = Duration::from_millis(10);

/// How often the server sends a heartbeat while the binlog is quiet.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// A stream with no event (not even a heartbeat) for this long is lost.
pub const SILENCE: Duration = Duration::from_secs(5);

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
    let mut reconnect_wait = super::FIRST_RECONNECT_WAIT;
    let outage = Outage::new();
    loop {
        let current = match opened.take() {
            Some(current) => Ok(current),
            None => open(target, server_id).await,
        };
        match current {
            Ok(current) => {
                outage.recovered(|ended| {
                    info!(database = %database, server_id, outage = %ended.lasted_text(),
                        failures = ended.failures, "commit feed back after an outage");
                });
                info!(database = %database, server_id, "commit feed following the binlog");
                wake.set_commit_feed(true);
                // Rows committed while no one followed have no event coming.
                wake.wake();
                let lost = follow(current, wake).await;
                reconnect_wait = super::FIRST_RECONNECT_WAIT;
                outage.failed(|| {
                    warn!(database = %database, error = %lost,
                        "commit feed lost the binlog stream; reconnecting");
                });
            }
            Err(err) => {
                outage.failed(|| {
                    warn!(database = %database, error = %err, retry_in = ?reconnect_wait,
                        "commit feed cannot follow the binlog; probing until it reconnects");
                });
            }
        }
        wake.set_commit_feed(false);
        tokio::time::sleep(reconnect_wait).await;
        reconnect_wait = (reconnect_wait * 2).min(super::MAX_RECONNECT_WAIT);
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
    use crate::store::TableName;

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
