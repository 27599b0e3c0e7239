//! Row decoding: typed access to a result row's columns by position ([`Columns`]) and the row
//! types the store's queries return ([`FromColumns`]), the same for every backend.

use crate::record::Status;
use crate::store::{ErrorGroup, EventDetail, EventSummary, FailedRow, StatusCounts};

/// Typed access to the columns of a result row, by position.
pub(crate) trait Columns {
    /// A non-null text column.
    fn text(&self, index: usize) -> Result<String, sqlx::Error>;
    /// A nullable text column.
    fn opt_text(&self, index: usize) -> Result<Option<String>, sqlx::Error>;
    /// A BIGINT column or COUNT/MIN aggregate.
    fn int(&self, index: usize) -> Result<i64, sqlx::Error>;
    /// A nullable BIGINT column (`lock_until_ms`).
    fn opt_int(&self, index: usize) -> Result<Option<i64>, sqlx::Error>;
    /// An INT column (`retry_count`).
    fn int32(&self, index: usize) -> Result<i32, sqlx::Error>;
    /// A BLOB/BYTEA column.
    fn bytes(&self, index: usize) -> Result<Vec<u8>, sqlx::Error>;
}

impl<R> Columns for R
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i32: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn text(&self, index: usize) -> Result<String, sqlx::Error> {
        self.try_get(index)
    }
    fn opt_text(&self, index: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(index)
    }
    fn int(&self, index: usize) -> Result<i64, sqlx::Error> {
        self.try_get(index)
    }
    fn opt_int(&self, index: usize) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(index)
    }
    fn int32(&self, index: usize) -> Result<i32, sqlx::Error> {
        self.try_get(index)
    }
    fn bytes(&self, index: usize) -> Result<Vec<u8>, sqlx::Error> {
        self.try_get(index)
    }
}

/// A value decoded from one result row.
pub(crate) trait FromColumns: Sized {
    /// Decodes the row.
    fn from_columns(row: &dyn Columns) -> Result<Self, sqlx::Error>;
}

/// A single BIGINT column (COUNT(*), a migration version).
pub(crate) struct Int(pub(crate) i64);

impl FromColumns for Int {
    fn from_columns(row: &dyn Columns) -> Result<Int, sqlx::Error> {
        Ok(Int(row.int(0)?))
    }
}

/// The count a `COUNT(*)` query returned: 0 for no row.
pub(crate) fn count(rows: &[Int]) -> u64 {
    rows.first()
        .map_or(0, |Int(n)| u64::try_from(*n).unwrap_or(0))
}

/// A single `event_id` column.
pub(crate) struct EventId(pub(crate) String);

impl FromColumns for EventId {
    fn from_columns(row: &dyn Columns) -> Result<EventId, sqlx::Error> {
        Ok(EventId(row.text(0)?))
    }
}

/// A primary key: `app_code`, `event_id`.
pub(crate) struct Key {
    pub(crate) app_code: String,
    pub(crate) event_id: String,
}

impl FromColumns for Key {
    fn from_columns(row: &dyn Columns) -> Result<Key, sqlx::Error> {
        Ok(Key {
            app_code: row.text(0)?,
            event_id: row.text(1)?,
        })
    }
}

/// One row a partition read returns (`statement::rows::READ_COLUMNS`), as the judge reads it
/// (public for the judge's fuzz target, `host/fuzz`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateRow {
    /// `event_id`.
    pub event_id: String,
    /// `event_type`.
    pub event_type: String,
    /// `room_id`.
    pub room_id: String,
    /// `envelope`: the protobuf-encoded [`crate::envelope::EventEnvelope`].
    pub envelope: Vec<u8>,
    /// `created_at_ms`.
    pub created_at_ms: i64,
    /// `retry_count`.
    pub retry_count: i32,
}

impl FromColumns for CandidateRow {
    fn from_columns(row: &dyn Columns) -> Result<CandidateRow, sqlx::Error> {
        Ok(CandidateRow {
            event_id: row.text(0)?,
            event_type: row.text(1)?,
            room_id: row.text(2)?,
            envelope: row.bytes(3)?,
            created_at_ms: row.int(4)?,
            retry_count: row.int32(5)?,
        })
    }
}

/// One row of the counts query: status, rows, oldest `created_at_ms`.
pub(crate) struct StatusCountRow {
    status: String,
    rows: i64,
    oldest_created_at_ms: i64,
}

impl FromColumns for StatusCountRow {
    fn from_columns(row: &dyn Columns) -> Result<StatusCountRow, sqlx::Error> {
        Ok(StatusCountRow {
            status: row.text(0)?,
            rows: row.int(1)?,
            oldest_created_at_ms: row.int(2)?,
        })
    }
}

/// Folds the counts query's rows into [`StatusCounts`]; unknown status values are ignored.
pub(crate) fn status_counts(rows: &[StatusCountRow], now_ms: i64) -> StatusCounts {
    let mut counts = StatusCounts::default();
    for row in rows {
        let n = u64::try_from(row.rows).unwrap_or(0);
        match Status::parse(&row.status) {
            Some(Status::Pending) => {
                counts.pending = n;
                counts.oldest_pending_age_ms = Some((now_ms - row.oldest_created_at_ms).max(0));
            }
            Some(Status::Delivering) => counts.delivering = n,
            Some(Status::Retryable) => counts.retryable = n,
            Some(Status::Failed) => counts.failed = n,
            Some(Status::Delivered) => counts.delivered = n,
            None => {}
        }
    }
    counts
}

impl FromColumns for FailedRow {
    fn from_columns(row: &dyn Columns) -> Result<FailedRow, sqlx::Error> {
        Ok(FailedRow {
            app_code: row.text(0)?,
            event_id: row.text(1)?,
            event_type: row.text(2)?,
            room_id: row.text(3)?,
            retry_count: u32::try_from(row.int32(4)?).unwrap_or(0),
            last_error: row.opt_text(5)?,
            created_at_ms: row.int(6)?,
            updated_at_ms: row.int(7)?,
        })
    }
}

impl FromColumns for EventSummary {
    fn from_columns(row: &dyn Columns) -> Result<EventSummary, sqlx::Error> {
        Ok(EventSummary {
            app_code: row.text(0)?,
            event_id: row.text(1)?,
            event_type: row.text(2)?,
            room_id: row.text(3)?,
            status: row.text(4)?,
            retry_count: u32::try_from(row.int32(5)?).unwrap_or(0),
            last_error: row.opt_text(6)?,
            created_at_ms: row.int(7)?,
            updated_at_ms: row.int(8)?,
            next_retry_at_ms: row.int(9)?,
            worker_id: row.text(10)?,
            lock_until_ms: row.opt_int(11)?,
        })
    }
}

impl FromColumns for EventDetail {
    fn from_columns(row: &dyn Columns) -> Result<EventDetail, sqlx::Error> {
        Ok(EventDetail {
            summary: EventSummary::from_columns(row)?,
            envelope: row.bytes(12)?,
        })
    }
}

impl FromColumns for ErrorGroup {
    fn from_columns(row: &dyn Columns) -> Result<ErrorGroup, sqlx::Error> {
        Ok(ErrorGroup {
            last_error: row.opt_text(0)?,
            count: u64::try_from(row.int(1)?).unwrap_or(0),
            first_seen_ms: row.int(2)?,
            last_seen_ms: row.int(3)?,
        })
    }
}

/// One row of `table_index_columns`: index name, key column (`None` for an expression), and
/// whether the index holds only the rows of a `WHERE`.
pub(crate) struct IndexColumn {
    pub(crate) index: String,
    pub(crate) column: Option<String>,
    pub(crate) partial: bool,
}

impl FromColumns for IndexColumn {
    fn from_columns(row: &dyn Columns) -> Result<IndexColumn, sqlx::Error> {
        Ok(IndexColumn {
            index: row.text(0)?,
            column: row.opt_text(1)?,
            partial: row.int(2)? != 0,
        })
    }
}

/// A single text column (a column name).
pub(crate) struct Name(pub(crate) String);

impl FromColumns for Name {
    fn from_columns(row: &dyn Columns) -> Result<Name, sqlx::Error> {
        Ok(Name(row.text(0)?))
    }
}

/// One text column that may be NULL (a catalog's expression).
pub(crate) struct OptText(pub(crate) Option<String>);

impl FromColumns for OptText {
    fn from_columns(row: &dyn Columns) -> Result<OptText, sqlx::Error> {
        Ok(OptText(row.opt_text(0)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_counts_fold() {
        let rows = [
            StatusCountRow {
                status: "pending".into(),
                rows: 3,
                oldest_created_at_ms: 40,
            },
            StatusCountRow {
                status: "delivered".into(),
                rows: 7,
                oldest_created_at_ms: 1,
            },
            StatusCountRow {
                status: "unknown".into(),
                rows: 1,
                oldest_created_at_ms: 1,
            },
        ];
        let counts = status_counts(&rows, 100);
        assert_eq!(counts.pending, 3);
        assert_eq!(counts.delivered, 7);
        assert_eq!(counts.oldest_pending_age_ms, Some(60));
        assert_eq!(status_counts(&[], 100).oldest_pending_age_ms, None);
    }
}
