-- outboxd migration 0002 (SQLite): the retry, lease and room indexes hold live rows only.
--
-- Migration 0001 indexed every row in all four claim indexes, so every status change rewrote
-- four index entries, and the history of `delivered` rows sat in all of them. Two costs followed
-- (docs/PERFORMANCE.md, "History does not slow claims"): in `idx_<table>_room (app_code,
-- room_id, …)` a room's fresh rows sit beside that room's history, so the 500 rows of one claim
-- dirtied up to 500 leaf pages spread over the whole index (and as many WAL pages per commit):
-- a claim + mark of 500 rows cost 2.5× more beside 10M delivered rows than beside 10k; and the
-- writes of every status change went to four indexes.
--
-- Each index now holds only the rows its statements read. SQLite uses a partial index only for
-- a query whose WHERE implies the index's WHERE; every statement that reads these indexes names
-- the status as a literal (`c.status = 'retryable'`, `p.status = 'pending'`, …), which implies
-- these conditions (an `OR` of equalities, not `IN`: SQLite proves `x = 'a'` ⇒ `x = 'a' OR …`,
-- not `x = 'a'` ⇒ `x IN ('a', …)`). The key columns are those `migrate` checks, so its check of the
-- claim indexes (host/src/store/schema.rs) accepts them. `idx_<table>_pending` stays whole: it
-- also serves retention (`delivered` / `failed` rows by age), `failed list` and the counts, and
-- its fresh entries sit at the end of each status's range, whatever the history.
--
-- On an existing table this rebuilds three indexes in `migrate`'s write transaction: producers
-- wait for it (a scan of the table; 2.3 s for 1M rows on the development machine).

DROP INDEX IF EXISTS idx_{{table}}_retry;
DROP INDEX IF EXISTS idx_{{table}}_lease;
DROP INDEX IF EXISTS idx_{{table}}_room;
-- Due retryable rows: the claim's retryable branch.
CREATE INDEX idx_{{table}}_retry ON {{table}} (app_code, status, next_retry_at_ms, created_at_ms, event_id)
    WHERE status = 'retryable';
-- Leased rows: the claim's expired-lease branch.
CREATE INDEX idx_{{table}}_lease ON {{table}} (app_code, status, lock_until_ms, created_at_ms, event_id)
    WHERE status = 'delivering';
-- Per-room ordering's room heads and probes ("an earlier event of this room still pending,
-- retryable or delivering?", one probe per status).
CREATE INDEX idx_{{table}}_room ON {{table}} (app_code, status, room_id, created_at_ms, event_id)
    WHERE status = 'pending' OR status = 'retryable' OR status = 'delivering';
