-- outboxd migration 0005 (PostgreSQL): commits notify only while some host waits for them.
--
-- PostgreSQL serialises every transaction that sends a NOTIFY: PreCommit_Notify takes one
-- cluster-wide lock and holds it through the commit's WAL flush, so notifying commits cannot
-- share a flush. With migration 0002's trigger every producer commit notified, which capped the
-- producers at about one commit per WAL flush (~1,000/s on a disk that flushes in ~1 ms, for the
-- whole cluster). Now a commit notifies only while a host is waiting for one ("armed"); a host
-- whose table is busy probes instead and leaves the producers alone (docs/operate/wake.md,
-- "PostgreSQL").
--
-- The protocol, on advisory locks keyed (hashtext('outboxd_<table>'), slot), slot 0..7:
-- - An armed host holds its slot's lock exclusively (a session lock on its gate connection,
--   released when that connection ends, so a dead host leaves nothing behind). Up to eight hosts
--   can be armed on one table; a host beyond them probes.
-- - This trigger takes every slot's lock SHARED until the transaction ends, without waiting:
--   if any slot is held or being asked for by a host, it notifies.
-- - So a host that arms waits for the transactions that already passed this trigger without
--   notifying (they hold the slot shared) to end, then claims once more: their rows are
--   committed by then. Every transaction after that finds the slot taken and notifies.
-- Everything this trigger takes is a transaction lock: a producer that fails anywhere leaves
-- no lock behind.
--
-- Replacing the function keeps both triggers (0002's INSERT trigger, 0003's requeue trigger).

CREATE OR REPLACE FUNCTION outboxd_notify_{{table}}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gate CONSTANT int4 := hashtext(lower('outboxd_{{table}}'));
BEGIN
    FOR slot IN 0..7 LOOP
        IF NOT pg_try_advisory_xact_lock_shared(gate, slot) THEN
            PERFORM pg_notify(lower('outboxd_{{table}}'), '');
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
