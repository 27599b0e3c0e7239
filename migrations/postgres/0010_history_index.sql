-- outboxd migration 0010 (PostgreSQL): the status index replaced by one of finished rows only.
--
-- A mark cannot update a row in place (HOT) when it changes `status`, so PostgreSQL adds an entry
-- for the new row version to every index whose predicate it meets. The status index
-- `idx_<table>_pending` (app_code, status, created_at_ms, event_id) held every row: a producer's
-- insert, a mark to `retryable` and a mark to `delivered` each added an entry. The live rows are
-- in the partition index already (migration 0007), so the status index is replaced by
-- `idx_<table>_history`, the same columns over `delivered` and `failed` rows only: retention, the
-- failed listings, requeue and the console's finished pages read it; the console's live pages
-- read the partition index.
--
-- Online: run outside a transaction, one statement at a time (`Migration::outside_transaction`).
-- `CREATE INDEX CONCURRENTLY` builds the new index while producers and hosts keep writing, then
-- the old one is dropped concurrently. Run again after an interruption, it starts the new index
-- over. Hosts of an earlier version still running find live rows by the partition index or the
-- primary key: slower, never wrong (docs/operate/upgrade.md).

DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_hist_new;
CREATE INDEX CONCURRENTLY idx_{{table}}_hist_new ON {{table}} (app_code, status, created_at_ms, event_id)
    WHERE status IN ('delivered', 'failed');
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_history;
ALTER INDEX idx_{{table}}_hist_new RENAME TO idx_{{table}}_history;
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_pending;
