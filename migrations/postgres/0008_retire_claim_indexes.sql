-- outboxd migration 0008 (PostgreSQL): the indexes of the per-row claim, dropped.
--
-- Hosts own partitions of rooms and read them through the partition index (migration 0007); the
-- retry, lease and room indexes served only the per-row claim of earlier versions, and every
-- status change rewrote them. Counts, retention, the failed listings and the console read the
-- status index `idx_<table>_pending`, which stays.
--
-- Run outside a transaction: DROP INDEX CONCURRENTLY waits for the transactions using an index
-- to end instead of locking the table, so producers keep writing. Each statement is safe to run
-- again after an interruption. Hosts of an earlier version still running read the status index
-- instead: slower, never wrong (docs/operate/upgrade.md).

DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_retry;
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_lease;
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_room;
