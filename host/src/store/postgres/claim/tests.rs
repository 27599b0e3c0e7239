//! Unit tests of PostgreSQL's claim text: one statement per branch that claims and leases, and the
//! reject of leased rows.

use super::reject_leased_rows;
use crate::store::statement::Arg;
use crate::store::statement::claim::{ClaimBranch, Statements, reject_rows};
use crate::store::statement::tests::{assert_placeholders, claim_params, lease, table};
use crate::store::{Backend, DeliveryOrder, RejectedRow};

#[test]
fn postgres_claims_and_leases_in_one_statement_per_branch() {
    let pg = Statements::new(Backend::Postgres, &table());
    assert!(pg.leases_in_claim());
    assert_eq!(
        pg.claim_statement(ClaimBranch::ExpiredLease, DeliveryOrder::None),
        "UPDATE room_outbox SET retry_count = CASE WHEN status = 'delivering' THEN retry_count + 1 ELSE retry_count END, \
         status = 'delivering', next_retry_at_ms = 0, worker_id = $1, lock_until_ms = $2, updated_at_ms = $3 \
         FROM unnest(ARRAY(SELECT c.ctid FROM room_outbox c WHERE c.app_code = $4 AND c.status = 'delivering' \
         AND c.lock_until_ms <= $5 ORDER BY c.lock_until_ms, c.created_at_ms, c.event_id LIMIT $6 FOR UPDATE SKIP LOCKED)) \
         WITH ORDINALITY AS claimed(address, position) WHERE room_outbox.ctid = claimed.address \
         RETURNING room_outbox.event_id, room_outbox.event_type, room_outbox.room_id, room_outbox.envelope, \
         room_outbox.created_at_ms, room_outbox.retry_count - 1, claimed.position"
    );
    assert!(
        pg.claim_statement(ClaimBranch::Pending, DeliveryOrder::PerRoom)
            .contains("room_outbox.retry_count, claimed.position")
    );
    let params = claim_params(DeliveryOrder::PerRoom, true);
    for branch in ClaimBranch::ALL {
        let bound = pg
            .claim_lease_query(branch, &params, &lease(), 4)
            .expect("PostgreSQL leases in the claim");
        assert_placeholders(Backend::Postgres, &bound);
        assert_eq!(
            bound.args[..3],
            [Arg::from("w1"), Arg::Int(5_000), Arg::Int(7)]
        );
        assert_eq!(bound.args[3], Arg::from("live"));
        assert_eq!(bound.args.last(), Some(&Arg::Int(4)));
    }
    for backend in [Backend::Sqlite, Backend::MySql] {
        let statements = Statements::new(backend, &table());
        assert!(!statements.leases_in_claim());
        assert!(
            statements
                .claim_lease_query(ClaimBranch::Pending, &params, &lease(), 4)
                .is_none()
        );
        assert_eq!(
            statements.claim_statement(ClaimBranch::Pending, DeliveryOrder::None),
            statements.claim_select(ClaimBranch::Pending, DeliveryOrder::None)
        );
    }
    let rejected = [RejectedRow {
        event_id: "a".into(),
        event_type: "T".into(),
        room_id: "r".into(),
        reason: "bad".into(),
    }];
    let reject = reject_leased_rows(&table(), &lease(), 100, &rejected);
    assert_eq!(
        &*reject.sql,
        "UPDATE room_outbox SET status = 'failed', lock_until_ms = NULL, last_error = CASE event_id WHEN $1 THEN $2 \
         ELSE last_error END, updated_at_ms = $3 WHERE app_code = $4 AND status = 'delivering' AND worker_id = $5 \
         AND lock_until_ms = $6 AND event_id = ANY($7)"
    );
    // The reason is bound as a `last_error`: cut to the column's size, like every other one.
    let long = [RejectedRow {
        reason: "x".repeat(3 * crate::record::LAST_ERROR_MAX_BYTES),
        ..rejected[0].clone()
    }];
    for reject in [
        reject_leased_rows(&table(), &lease(), 100, &long),
        reject_rows(Backend::MySql, &table(), "live", 100, &long),
    ] {
        let Arg::Text(reason) = &reject.args[1] else {
            panic!("reason bound as {:?}", reject.args[1]);
        };
        assert!(
            reason.len() <= crate::record::LAST_ERROR_MAX_BYTES,
            "{}",
            reason.len()
        );
    }
}
