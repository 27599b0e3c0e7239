//! Unit tests of the statement builders: the exact text per backend, placeholders matching the
//! bound arguments.

use super::failed::{count_failed, requeue_failed, select_failed};
use super::insert::{distinct_records, insert_records};
use super::mark::{MarkAt, MarkColumns, mark_rows, mark_rows_counted};
use super::rows::{Statements, reject_rows};
use super::{Arg, Bound};
use crate::record::{Record, Status};
use crate::store::{
    Backend, DEFAULT_PARTITIONS, DEFAULT_TABLE, Disposition, FailedFilter, Lease, Mark,
    PartitionBatch, PartitionFence, RejectedRow, TableName,
};

pub(crate) fn table() -> TableName {
    TableName::new(DEFAULT_TABLE).unwrap()
}

/// The statements of the default table on `backend`.
fn statements(backend: Backend) -> Statements {
    Statements::new(backend, &table())
}

pub(crate) fn lease() -> Lease {
    Lease {
        app_code: "live".into(),
        worker_id: "w1".into(),
        lock_until_ms: 5_000,
        partitions: vec![PartitionBatch {
            fence: PartitionFence {
                partition: 7,
                epoch: 3,
            },
            first_created_ms: 10,
            last_created_ms: 20,
            full: false,
        }],
        partition_count: DEFAULT_PARTITIONS,
    }
}

fn record(event_id: &str) -> Record {
    Record::build(
        "room-1",
        "RoomGiftSent",
        1,
        std::time::SystemTime::now(),
        &"body".to_string(),
    )
    .with_event_id(event_id)
}

/// Placeholders in order: `?` everywhere, or `$1…$n` on PostgreSQL; matches the args.
pub(crate) fn assert_placeholders(backend: Backend, bound: &Bound) {
    match backend {
        Backend::Postgres => {
            assert!(!bound.sql.contains('?'), "{}", bound.sql);
            for n in 1..=bound.args.len() {
                assert!(
                    bound.sql.contains(&format!("${n}")),
                    "${n} missing: {}",
                    bound.sql
                );
            }
            assert!(!bound.sql.contains(&format!("${}", bound.args.len() + 1)));
        }
        Backend::Sqlite | Backend::MySql => {
            assert!(!bound.sql.contains('$'), "{}", bound.sql);
            assert_eq!(
                bound.sql.matches('?').count(),
                bound.args.len(),
                "{}",
                bound.sql
            );
        }
    }
}

#[test]
fn counts_statements() {
    let mysql = statements(Backend::MySql);
    assert_eq!(
        &*mysql.counts_query(Some("live")).sql,
        "SELECT status, COUNT(*), MIN(created_at_ms) FROM room_outbox WHERE app_code = ? GROUP BY status"
    );
    assert_eq!(mysql.counts_query(Some("live")).args.len(), 1);
    assert!(mysql.counts_query(None).args.is_empty());
    // PostgreSQL: the live rows from the partition index, the finished ones from the history
    // index, the app code bound once for each.
    let pg = statements(Backend::Postgres);
    let one = pg.counts_query(Some("live"));
    assert_eq!(
        &*one.sql,
        "SELECT status, COUNT(*), MIN(created_at_ms) FROM room_outbox WHERE app_code = $1 \
         AND status IN ('pending', 'retryable', 'delivering') AND updated_at_ms IS NOT NULL \
         GROUP BY status UNION ALL SELECT status, COUNT(*), MIN(created_at_ms) FROM room_outbox \
         WHERE app_code = $2 AND status IN ('delivered', 'failed') GROUP BY status"
    );
    assert_eq!(one.args, vec![Arg::from("live"); 2]);
    let all = pg.counts_query(None);
    assert!(
        all.sql
            .contains(" WHERE status IN ('delivered', 'failed') GROUP BY status")
    );
    assert!(all.args.is_empty());
}

#[test]
fn insert_ignores_duplicate_keys_only() {
    let records = [record("a"), record("b")];
    let refs: Vec<&Record> = records.iter().collect();
    let sqlite = insert_records(Backend::Sqlite, &table(), &refs);
    assert!(sqlite.sql.ends_with("(?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?) ON CONFLICT (app_code, event_id) DO NOTHING"));
    assert!(!sqlite.sql.contains("IGNORE"));
    assert_eq!(sqlite.args.len(), 14);
    assert_eq!(sqlite.args[4], Arg::Bytes(records[0].encoded_envelope()));
    let mysql = insert_records(Backend::MySql, &table(), &refs);
    assert!(
        mysql
            .sql
            .ends_with(" ON DUPLICATE KEY UPDATE event_id = event_id")
    );
    assert!(!mysql.sql.contains("IGNORE"));
    let pg = insert_records(Backend::Postgres, &table(), &refs);
    assert!(
        pg.sql
            .contains("($8, $9, $10, $11, 'pending', $12, $13, 0, NULL, '', NULL, 0, $14)")
    );
    for (backend, bound) in [
        (Backend::Sqlite, sqlite),
        (Backend::MySql, mysql),
        (Backend::Postgres, pg),
    ] {
        assert_placeholders(backend, &bound);
    }
}

#[test]
fn duplicate_records_keep_the_first() {
    let mut second = record("a");
    second.event_type = "Other".into();
    let records = [
        record("a"),
        second,
        record("b"),
        record("a").with_app_code("other"),
    ];
    let distinct = distinct_records(&records);
    assert_eq!(distinct.len(), 3);
    assert_eq!(distinct[0].event_type, "RoomGiftSent");
}

#[test]
fn reject_counts_an_expired_lease_first() {
    let rejected = [RejectedRow {
        event_id: "a".into(),
        event_type: "T".into(),
        room_id: "r".into(),
        reason: "bad".into(),
    }];
    let fence = PartitionFence {
        partition: 7,
        epoch: 3,
    };
    let pg = statements(Backend::Postgres);
    let bound = reject_rows(&pg, "live", ("host-a", &fence), 100, &rejected);
    assert!(
        bound
            .sql
            .starts_with("UPDATE room_outbox SET retry_count = CASE WHEN status = 'delivering'")
    );
    assert!(bound.sql.contains("status = 'failed', next_retry_at_ms = 0, lock_until_ms = NULL, last_error = CASE event_id WHEN $1 THEN $2 ELSE last_error END"));
    // Fenced as a mark is: live rows of a partition the host still owns at its epoch.
    assert!(
        bound.sql.ends_with(
            "AND status IN ('pending', 'retryable', 'delivering') AND EXISTS (SELECT 1 FROM \
         room_outbox_partitions p WHERE p.app_code = $6 AND p.owner = $7 AND p.partition_id = $8 \
         AND p.epoch = $9 FOR KEY SHARE)"
        ),
        "{}",
        bound.sql
    );
    assert_eq!(
        (
            bound.args[6].clone(),
            bound.args[7].clone(),
            bound.args[8].clone()
        ),
        (Arg::from("host-a"), Arg::Int(7), Arg::Int(3))
    );
    assert_placeholders(Backend::Postgres, &bound);
}

#[test]
fn dispositions_to_columns() {
    let at = MarkAt::first(100);
    assert_eq!(
        MarkColumns::of(&Disposition::Delivered),
        MarkColumns {
            status: Status::Delivered,
            failed_attempt: false,
            next_retry_at_ms: 0,
            last_error: None
        }
    );
    let long = "x".repeat(600);
    let retryable = Disposition::Retryable {
        next_retry_at_ms: 9,
        error: long.clone(),
    };
    let retry = MarkColumns::of(&retryable);
    assert_eq!(retry.status, Status::Retryable);
    assert!(retry.failed_attempt);
    assert_eq!(retry.next_retry_at_ms, 9);
    // A retry time is above 0 even when a policy asks for 0: 0 means "not retryable".
    let at_zero = Disposition::Deferred {
        next_retry_at_ms: 0,
        error: String::new(),
    };
    assert_eq!(MarkColumns::of(&at_zero).next_retry_at_ms, 1);
    assert_eq!(retry.last_error, Some(long.as_str()));
    let marks = [Mark {
        event_id: "a".into(),
        disposition: Disposition::Retryable {
            next_retry_at_ms: 9,
            error: long.clone(),
        },
    }];
    let bound = mark_rows(&statements(Backend::Sqlite), &lease(), &marks, at);
    assert!(
        bound.args.contains(&Arg::from("x".repeat(512))),
        "last_error cut when bound"
    );
    let failed = Disposition::Failed {
        error: "boom".into(),
    };
    let failed = MarkColumns::of(&failed);
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.next_retry_at_ms, 0, "0 outside retryable");
    assert_eq!(failed.last_error, Some("boom"));
}

fn mixed_marks() -> Vec<Mark> {
    vec![
        Mark {
            event_id: "a".into(),
            disposition: Disposition::Delivered,
        },
        Mark {
            event_id: "b".into(),
            disposition: Disposition::Retryable {
                next_retry_at_ms: 700,
                error: "later".into(),
            },
        },
        Mark {
            event_id: "c".into(),
            disposition: Disposition::Failed {
                error: "never".into(),
            },
        },
    ]
}

#[test]
fn mark_is_one_fenced_statement() {
    let at = MarkAt::first(100);
    let marks = mixed_marks();
    let pg = mark_rows(&statements(Backend::Postgres), &lease(), &marks, at);
    assert_eq!(
        &*pg.sql,
        "UPDATE room_outbox SET retry_count = CASE WHEN status = 'delivering' THEN retry_count + 1 \
         ELSE retry_count END + CASE event_id WHEN $1 THEN 1 WHEN $2 THEN 1 ELSE 0 END, \
         status = CASE event_id WHEN $3 THEN 'delivered' WHEN $4 THEN 'retryable' WHEN $5 THEN 'failed' \
         ELSE status END, next_retry_at_ms = CASE event_id WHEN $6 THEN $7 ELSE 0 END, \
         last_error = CASE event_id WHEN $8 THEN $9 WHEN $10 THEN $11 ELSE NULL END, \
         lock_until_ms = NULL, updated_at_ms = $12, \
         worker_id = CASE event_id WHEN $13 THEN $14 WHEN $15 THEN $16 ELSE '' END \
         WHERE app_code = $17 AND (hashtextextended(room_id, 0) & 63) = $18 AND updated_at_ms IS NOT NULL \
         AND created_at_ms >= $19 AND created_at_ms <= $20 \
         AND status IN ('pending', 'retryable', 'delivering') AND event_id = ANY($21) \
         AND EXISTS (SELECT 1 FROM room_outbox_partitions p WHERE p.app_code = $22 AND p.owner = $23 \
         AND p.partition_id = $24 AND p.epoch = $25 FOR KEY SHARE) RETURNING event_id"
    );
    assert_eq!(pg.args[6], Arg::Int(700));
    // PostgreSQL binds the ids as one array: no IN list rebuilt per row under a generic plan.
    assert_eq!(
        pg.args[20],
        Arg::TextList(vec!["a".into(), "b".into(), "c".into()])
    );
    assert_eq!(
        (pg.args[17].clone(), pg.args[24].clone()),
        (Arg::Int(7), Arg::Int(3))
    );
    assert_eq!(pg.args[8], Arg::from("later"));
    // Only the rows not delivered name the host that tried them.
    assert_eq!(
        (
            pg.args[12].clone(),
            pg.args[13].clone(),
            pg.args[14].clone()
        ),
        (Arg::from("b"), Arg::from("w1"), Arg::from("c"))
    );
    assert_placeholders(Backend::Postgres, &pg);

    let mysql = mark_rows_counted(&statements(Backend::MySql), &lease(), &marks, at);
    assert!(!mysql.sql.contains("RETURNING"));
    assert!(
        mysql
            .sql
            .starts_with("UPDATE room_outbox FORCE INDEX (PRIMARY) SET retry_count = CASE")
    );
    assert!(!pg.sql.contains("FORCE"));
    assert_placeholders(Backend::MySql, &mysql);
    let marked = super::mark::marked_rows(&statements(Backend::MySql), &lease(), &marks, 100);
    assert_eq!(
        &*marked.sql,
        "SELECT event_id FROM room_outbox FORCE INDEX (PRIMARY) WHERE app_code = ? AND event_id IN (?, ?, ?, ?) \
         AND status <> 'pending' AND lock_until_ms IS NULL AND updated_at_ms = ?"
    );
    // Three ids padded to four: the last one again.
    assert_eq!(marked.args[3], marked.args[4]);

    // A batch whose rows all get one status sets it as a literal, no CASE.
    let delivered = &marks[..1];
    let sqlite = mark_rows(&statements(Backend::Sqlite), &lease(), delivered, at);
    assert!(
        sqlite.sql.contains(
            "status = 'delivered', next_retry_at_ms = 0, last_error = NULL, lock_until_ms = NULL, \
             updated_at_ms = ?, worker_id = '' WHERE app_code = ?"
        ),
        "{}",
        sqlite.sql
    );
    // SQLite has one partition: no partition expression, the owner's fence all the same.
    assert!(!sqlite.sql.contains("hashtextextended"));
    assert!(
        sqlite
            .sql
            .contains("AND event_id IN (?) AND EXISTS (SELECT 1 FROM room_outbox_partitions p"),
        "{}",
        sqlite.sql
    );
}

#[test]
fn a_mark_of_several_partitions_fences_each_row_on_its_own() {
    let at = MarkAt::first(100);
    let mut lease = lease();
    lease.partitions.push(PartitionBatch {
        fence: PartitionFence {
            partition: 9,
            epoch: 5,
        },
        first_created_ms: 12,
        last_created_ms: 30,
        full: true,
    });
    let marks = &mixed_marks()[..1];
    let pg = mark_rows(&statements(Backend::Postgres), &lease, marks, at);
    assert!(
        pg.sql.contains(
            "WHERE (app_code, event_id) IN (SELECT $2, unnest($3)) \
             AND status IN ('pending', 'retryable', 'delivering') \
             AND EXISTS (SELECT 1 FROM room_outbox_partitions p WHERE p.app_code = $4 AND p.owner = $5 \
             AND p.partition_id = (hashtextextended(room_id, 0) & 63) \
             AND p.epoch = CASE p.partition_id WHEN $6 THEN $7 WHEN $8 THEN $9 END FOR KEY SHARE)"
        ),
        "{}",
        pg.sql
    );
    assert_eq!(
        pg.args[5..9],
        [Arg::Int(7), Arg::Int(3), Arg::Int(9), Arg::Int(5)]
    );
    assert_placeholders(Backend::Postgres, &pg);
    let mysql = mark_rows_counted(&statements(Backend::MySql), &lease, marks, at);
    assert!(
        mysql.sql.contains(
            "WHERE app_code = ? AND event_id IN (?) \
             AND status IN ('pending', 'retryable', 'delivering') \
             AND EXISTS (SELECT 1 FROM room_outbox_partitions p WHERE \
             p.app_code = ? AND p.owner = ? AND p.partition_id = outbox_partition \
             AND p.epoch = CASE p.partition_id"
        ),
        "{}",
        mysql.sql
    );
    assert_placeholders(Backend::MySql, &mysql);
    // An empty batch marks nothing.
    lease.partitions.clear();
    let none = mark_rows(&statements(Backend::Postgres), &lease, marks, at);
    assert!(none.sql.contains("AND 1 = 0 FOR KEY SHARE"), "{}", none.sql);
}

#[test]
fn failed_filters_are_anded() {
    let filter = FailedFilter {
        app_code: Some("live".into()),
        event_ids: vec!["a".into(), "b".into()],
        event_type: Some("T".into()),
        room_id: Some("r".into()),
        since_ms: Some(1),
        until_ms: Some(2),
        last_error: Some("boom".into()),
    };
    let list = select_failed(&statements(Backend::Postgres), &filter, 50);
    assert_eq!(
        &*list.sql,
        "SELECT app_code, event_id, event_type, room_id, retry_count, last_error, created_at_ms, updated_at_ms \
         FROM room_outbox WHERE app_code = $1 AND status = 'failed' AND event_id IN ($2, $3) \
         AND event_type = $4 AND room_id = $5 AND created_at_ms >= $6 AND created_at_ms < $7 \
         AND last_error = $8 ORDER BY created_at_ms, event_id LIMIT $9"
    );
    let requeue = requeue_failed(&statements(Backend::Sqlite), &FailedFilter::default(), 9);
    assert_eq!(
        &*requeue.sql,
        "UPDATE room_outbox SET status = 'pending', retry_count = 0, next_retry_at_ms = 0, worker_id = '', \
         lock_until_ms = NULL, updated_at_ms = ? WHERE status = 'failed'"
    );
    let count = count_failed(&statements(Backend::MySql), &filter);
    assert_placeholders(Backend::MySql, &count);
    assert!(
        count.sql.starts_with(
            "SELECT COUNT(*) FROM room_outbox WHERE app_code = ? AND outbox_failed = 1 AND status = 'failed'"
        )
    );
}

#[test]
fn key_sets_are_padded_to_a_few_lengths() {
    use super::padded_set_len;
    let lengths: Vec<usize> = [0, 1, 2, 3, 5, 17, 500, 512, 513, 999, 1000]
        .iter()
        .map(|&n| padded_set_len(n))
        .collect();
    assert_eq!(lengths, [0, 1, 2, 4, 8, 32, 512, 512, 999, 999, 1000]);
    let distinct: std::collections::BTreeSet<usize> = (1..=super::MAX_ROWS_PER_STATEMENT)
        .map(padded_set_len)
        .collect();
    assert_eq!(distinct.len(), 12, "{distinct:?}");
}

#[test]
fn a_live_window_reads_each_partition_newest_first_where_the_count_is_known() {
    use super::browse::{WindowRange, select_window};
    let window = |backend, status, partitions| {
        let range = WindowRange {
            app_code: "a",
            status: Some(status),
            partitions,
            ..WindowRange::default()
        };
        select_window(&statements(backend), &range, 50)
    };
    let pg = window(Backend::Postgres, Status::Pending, Some(64));
    assert!(
        pg.sql
            .contains(" FROM generate_series(0, 63) AS parts(p) CROSS JOIN LATERAL (SELECT "),
        "{}",
        pg.sql
    );
    assert!(
        pg.sql.ends_with(
            " FROM room_outbox WHERE app_code = $1 AND (hashtextextended(room_id, 0) & 63) = parts.p \
             AND status = 'pending' AND updated_at_ms IS NOT NULL \
             ORDER BY created_at_ms DESC, event_id DESC LIMIT $2) w \
             ORDER BY created_at_ms DESC, event_id DESC LIMIT $3"
        ),
        "{}",
        pg.sql
    );
    assert_eq!(pg.args[1], Arg::Int(50));
    assert_placeholders(Backend::Postgres, &pg);
    // A finished status, an unknown count, another database: one statement, no partitions.
    for other in [
        window(Backend::Postgres, Status::Delivered, Some(64)),
        window(Backend::Postgres, Status::Retryable, None),
        window(Backend::Sqlite, Status::Pending, Some(1)),
    ] {
        assert!(!other.sql.contains("LATERAL"), "{}", other.sql);
    }
    let history = window(Backend::Postgres, Status::Failed, Some(64));
    assert!(
        history
            .sql
            .contains("WHERE app_code = $1 AND status = 'failed' ORDER BY"),
        "{}",
        history.sql
    );
}

#[test]
fn a_live_window_on_mariadb_is_a_union_of_each_partitions_newest_rows() {
    use super::browse::{WindowRange, select_window};
    let window = |status, partitions| {
        let range = WindowRange {
            app_code: "a",
            status: Some(status),
            partitions,
            ..WindowRange::default()
        };
        select_window(&statements(Backend::MySql), &range, 50)
    };
    for status in [Status::Retryable, Status::Pending] {
        let part = |p: u32| {
            format!(
                "(SELECT {SUMMARY} FROM room_outbox FORCE INDEX (idx_room_outbox_part) \
                 WHERE app_code = ? AND outbox_partition = {p} AND status = '{status}' \
                 ORDER BY created_at_ms DESC, event_id DESC LIMIT ?)",
                SUMMARY = super::browse::SUMMARY_COLUMNS,
                status = status.as_str(),
            )
        };
        let page = window(status, Some(4));
        let parts: Vec<String> = (0..4).map(part).collect();
        assert_eq!(
            page.sql.as_ref(),
            format!(
                "{} ORDER BY created_at_ms DESC, event_id DESC LIMIT ?",
                parts.join(" UNION ALL ")
            ),
        );
        assert_eq!(page.args.len(), 4 * 2 + 1);
        assert_placeholders(Backend::MySql, &page);
    }
    // An unknown count: chunks over every partition a table may have; `failed`: its own
    // index, one statement.
    let unknown = window(Status::Pending, None);
    assert_eq!(
        unknown.sql.matches("UNION ALL").count(),
        7,
        "{}",
        unknown.sql
    );
    let failed = window(Status::Failed, Some(4));
    assert!(!failed.sql.contains("UNION"), "{}", failed.sql);
    assert!(failed.sql.contains("outbox_failed = 1"), "{}", failed.sql);
}
