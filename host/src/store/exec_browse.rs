//! The console's store operations, written once for every backend: the newest-first event
//! search (one window per status, merged; the filters no index holds applied on top), one row
//! by primary key, `failed` rows grouped by error, and deleting dead letters in chunks.

use super::driver::{Driver, begin_write, db};
use super::exec::{change_oldest_failed, count_failed_rows};
use super::session::Session;
use super::statement::browse::{
    WindowRange, delete_failed_keys, select_error_groups, select_event, select_window,
};
use crate::record::Status;
use crate::store::{
    DeleteFailedParams, ErrorGroup, ErrorGroupsParams, EventDetail, EventPage, EventQuery,
    EventSummary, StoreError,
};

/// Newest-first rows of one tenant matching `query` (see [`crate::store::browse`]).
pub(crate) async fn search_events<D: Driver>(
    driver: &D,
    query: &EventQuery,
) -> Result<EventPage, StoreError> {
    const OP: &str = "search_events";
    let statements = driver.statements();
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let limit = query.limit.max(1) as usize;
    if let Some(event_id) = &query.event_id {
        let rows = conn
            .rows::<EventDetail>(select_event(statements, &query.app_code, event_id))
            .await
            .map_err(db(OP))?;
        let scanned = rows.len() as u64;
        let events: Vec<EventSummary> = rows
            .into_iter()
            .map(|row| row.summary)
            .filter(|row| query.matches(row))
            .collect();
        return Ok(EventPage {
            events,
            next: None,
            scanned,
            filtered_on_top: false,
        });
    }
    let on_top = query.filters_on_top();
    // Rows read per status: a page (and one more, to know whether another follows), or the
    // window the filters on top are applied to.
    let window = if on_top {
        query.scan_limit.max(query.limit).max(1) as usize
    } else {
        limit + 1
    };
    let statuses: Vec<Status> = if query.statuses.is_empty() {
        Status::ALL.to_vec()
    } else {
        query.statuses.clone()
    };
    let mut merged: Vec<EventSummary> = Vec::new();
    for status in statuses {
        let range = WindowRange {
            app_code: &query.app_code,
            status: Some(status),
            since_ms: query.since_ms,
            until_ms: query.until_ms,
            before: query.before.as_ref(),
            partitions: statements.known_partitions(),
        };
        let rows = conn
            .rows::<EventSummary>(select_window(statements, &range, window as u32))
            .await
            .map_err(db(OP))?;
        merged.extend(rows);
    }
    merged.sort_by(|a, b| {
        (b.created_at_ms, b.event_id.as_str()).cmp(&(a.created_at_ms, a.event_id.as_str()))
    });
    let scanned = merged.len() as u64;
    // The newest `window` rows over every status: each status read its own newest `window`, so
    // these are exactly the newest of their union.
    let more_beyond = merged.len() > window || (on_top && merged.len() == window);
    merged.truncate(window);
    let edge = merged.last().map(EventSummary::cursor);
    let mut events: Vec<EventSummary> = merged.into_iter().filter(|r| query.matches(r)).collect();
    let next = if events.len() > limit {
        events.truncate(limit);
        events.last().map(EventSummary::cursor)
    } else if on_top && events.len() == limit && more_beyond {
        events.last().map(EventSummary::cursor)
    } else if on_top && more_beyond {
        edge
    } else {
        None
    };
    Ok(EventPage {
        events,
        next,
        scanned,
        filtered_on_top: on_top,
    })
}

/// One row with its envelope, by primary key.
pub(crate) async fn event<D: Driver>(
    driver: &D,
    app_code: &str,
    event_id: &str,
) -> Result<Option<EventDetail>, StoreError> {
    const OP: &str = "event";
    let query = select_event(driver.statements(), app_code, event_id);
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let rows = conn.rows::<EventDetail>(query).await.map_err(db(OP))?;
    Ok(rows.into_iter().next())
}

/// The newest `failed` rows of a tenant grouped by error, the largest group first.
pub(crate) async fn error_groups<D: Driver>(
    driver: &D,
    params: &ErrorGroupsParams,
) -> Result<Vec<ErrorGroup>, StoreError> {
    const OP: &str = "error_groups";
    let query = select_error_groups(driver.statements(), &params.app_code, params.window);
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let mut groups = conn.rows::<ErrorGroup>(query).await.map_err(db(OP))?;
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(b.last_seen_ms.cmp(&a.last_seen_ms))
            .then(a.last_error.cmp(&b.last_error))
    });
    Ok(groups)
}

/// Deletes the oldest `limit` `failed` rows matching the filter (or counts every match on a dry
/// run), by primary key in one short transaction.
pub(crate) async fn delete_failed<D: Driver>(
    driver: &D,
    params: &DeleteFailedParams,
) -> Result<u64, StoreError> {
    const OP: &str = "delete_failed";
    let statements = driver.statements();
    if params.dry_run {
        return count_failed_rows(driver, &params.filter, OP).await;
    }
    let mut tx = begin_write(driver, OP).await?;
    let oldest = (&params.filter, params.limit.max(1));
    let delete =
        |app_code: &str, event_ids: &[String]| delete_failed_keys(statements, app_code, event_ids);
    let deleted = change_oldest_failed(&mut *tx, statements, oldest, OP, delete).await?;
    tx.commit().await.map_err(db(OP))?;
    Ok(deleted)
}
