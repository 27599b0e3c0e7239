-- outboxd migration 0002 (PostgreSQL): wake delivery hosts on commit.
--
-- After every INSERT statement on the outbox table, notify the channel `outboxd_<table>` (lower
-- case). A statement-level trigger sends one notification per statement, however many rows it
-- inserts, and PostgreSQL delivers it only when the transaction commits (folding repeats of the
-- same notification within one transaction into one); a rolled-back insert notifies no one.
-- Hosts running `outboxd run` LISTEN on the channel (one dedicated connection each) and claim at
-- once, so producers that write rows directly (the Go service, any language) need no change.
-- Polling stays as the safety net for a notification lost while a listener reconnects.
--
-- Replacing the function and the trigger is idempotent.

CREATE OR REPLACE FUNCTION outboxd_notify_{{table}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(lower('outboxd_{{table}}'), '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outboxd_notify_{{table}} ON {{table}};

CREATE TRIGGER outboxd_notify_{{table}}
    AFTER INSERT ON {{table}}
    FOR EACH STATEMENT
    EXECUTE FUNCTION outboxd_notify_{{table}}();
