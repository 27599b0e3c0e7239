-- outboxd migration 0003 (PostgreSQL): a row put back to `pending` wakes the hosts too.
--
-- Migration 0002 notifies on INSERT only, so `outboxd requeue` (failed → pending, an UPDATE)
-- woke no one: running hosts found requeued rows at their next poll. This row-level trigger
-- notifies the same channel `outboxd_<table>` for every row an UPDATE moves to `pending` from
-- another status. The WHEN clause is evaluated by the executor for each updated row without
-- calling the function, so the claim and mark UPDATEs of the delivery path (to `delivering`,
-- `delivered`, `retryable`, `failed`) queue nothing; a requeue of many rows in one transaction
-- calls the function per row, and PostgreSQL folds the identical notifications of a transaction
-- into one, delivered at commit.
--
-- It reuses migration 0002's function; replacing the trigger is idempotent.

DROP TRIGGER IF EXISTS outboxd_requeue_notify_{{table}} ON {{table}};

CREATE TRIGGER outboxd_requeue_notify_{{table}}
    AFTER UPDATE OF status ON {{table}}
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND OLD.status IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION outboxd_notify_{{table}}();
