//! MySQL / MariaDB's producer insert. `INSERT … ON DUPLICATE KEY UPDATE` counts an ignored
//! duplicate as 1 with `CLIENT_FOUND_ROWS` (sqlx's, and many drivers') and as 0 without, so the
//! ids already present, read just before the INSERT, are subtracted from its affected rows. One
//! record (the common case) goes as a plain INSERT, a duplicate key counted 0 (InnoDB rolls back
//! the failed statement, not the transaction); several keep the count: a plain INSERT refused for
//! one duplicate would insert none of them, and the retry after it would upgrade the duplicate's
//! shared lock to an exclusive one, deadlocking two producers saving the same ids.

use std::collections::BTreeMap;

use super::MySqlStore;
use crate::record::Record;
use crate::store::driver::db;
use crate::store::exec::{SAVE_OP, SaveOps};
use crate::store::row::{Int, count};
use crate::store::session::Session;
use crate::store::statement::insert::{insert_records, insert_records_strict};
use crate::store::statement::{Bound, SqlBuilder};
use crate::store::{Backend, StoreError, TableName};

/// Most ids in one [`count_existing`] statement (below MariaDB's `in_predicate_conversion_threshold`).
pub(crate) const COUNT_EXISTING_MAX_IDS: usize = 500;

impl SaveOps for MySqlStore {
    const BACKEND: Backend = Backend::MySql;

    /// One record: the plain INSERT, a duplicate key counted 0. Several: the ids already present
    /// counted, then the INSERT; its affected rows less those.
    async fn insert_chunk<S: Session>(
        session: &mut S,
        table: &TableName,
        chunk: &[&Record],
    ) -> Result<u64, StoreError> {
        if chunk.len() == 1 {
            return match session
                .run(insert_records_strict(Backend::MySql, table, chunk))
                .await
            {
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(0),
                inserted => inserted.map_err(db(SAVE_OP)),
            };
        }
        let existing = existing(session, table, chunk).await?;
        let affected = session
            .run(insert_records(Backend::MySql, table, chunk))
            .await
            .map_err(db(SAVE_OP))?;
        Ok(affected.saturating_sub(existing))
    }
}

/// How many of `records` already exist, one primary-key range read per tenant and id chunk.
async fn existing<S: Session>(
    session: &mut S,
    table: &TableName,
    records: &[&Record],
) -> Result<u64, StoreError> {
    let mut by_app: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for record in records {
        by_app
            .entry(record.app_code.as_str())
            .or_default()
            .push(record.event_id.as_str());
    }
    let mut existing = 0;
    for (app_code, ids) in by_app {
        for ids in ids.chunks(COUNT_EXISTING_MAX_IDS) {
            let query = count_existing(table, app_code, ids);
            existing += count(&session.rows::<Int>(query).await.map_err(db(SAVE_OP))?);
        }
    }
    Ok(existing)
}

/// How many of `event_ids` of tenant `app_code` already exist. A plain consistent read: locking
/// reads here would make concurrent producers deadlock on the index gap their new ids share.
/// `app_code = ? AND event_id IN (…)` is a primary-key range; MariaDB plans a row-constructor
/// `(app_code, event_id) IN ((?, ?), …)` of hundreds of pairs as a scan (1.2 s for 1000 pairs on
/// a 5k-row table), and turns IN lists of [`COUNT_EXISTING_MAX_IDS`] or more into a derived table.
pub(crate) fn count_existing(table: &TableName, app_code: &str, event_ids: &[&str]) -> Bound {
    let mut b = SqlBuilder::new(Backend::MySql);
    b.push("SELECT COUNT(*) FROM ")
        .push(table.as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN ")
        .bind_list(event_ids.iter().copied());
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_ids_are_counted_by_primary_key() {
        let existing = count_existing(&TableName::default(), "live", &["e1", "e2"]);
        assert_eq!(
            &*existing.sql,
            "SELECT COUNT(*) FROM room_outbox WHERE app_code = ? AND event_id IN (?, ?)"
        );
        assert_eq!(existing.args.len(), 3);
    }
}
