-- outboxd migration 0006 (PostgreSQL): the retry and lease indexes hold live rows only.
--
-- PostgreSQL writes a new entry into every index whose predicate the new row version satisfies
-- on each status change (the status is in every key, so no update is HOT). With migration 0001's
-- whole indexes an event cost 12 index entries from insert to `delivered` (4 indexes × insert,
-- claim, mark). Now the retry index holds only `retryable` rows and the lease index only
-- `delivering` rows: 7 entries per delivered event, and `delivered` history no longer grows them.
--
-- Each predicate also names its claim branch's own column (`next_retry_at_ms IS NOT NULL`,
-- `lock_until_ms IS NOT NULL`). The claim branches compare that column (`<= $n`), which proves the
-- predicate; the per-room probes ("an earlier event of this room still retryable?") do not, so
-- the planner cannot read them from these small indexes instead of the room index, with or
-- without statistics (tests/stale_plans.rs).
--
-- Online: outboxd runs this file outside a transaction, one statement at a time, under a session
-- advisory lock (`Migration::outside_transaction`). `CREATE INDEX CONCURRENTLY` builds each new
-- index beside the old one while producers and hosts keep writing; the old one is then dropped
-- the same way and the new one renamed. Run again after an interruption, it starts the
-- replacement over; claims keep working throughout (without the index for a moment at worst).

DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_retry_new;
CREATE INDEX CONCURRENTLY idx_{{table}}_retry_new ON {{table}} (app_code, status, next_retry_at_ms, created_at_ms, event_id)
    WHERE status = 'retryable' AND next_retry_at_ms IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_retry;
ALTER INDEX idx_{{table}}_retry_new RENAME TO idx_{{table}}_retry;

DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_lease_new;
CREATE INDEX CONCURRENTLY idx_{{table}}_lease_new ON {{table}} (app_code, status, lock_until_ms, created_at_ms, event_id)
    WHERE status = 'delivering' AND lock_until_ms IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_lease;
ALTER INDEX idx_{{table}}_lease_new RENAME TO idx_{{table}}_lease;
