-- outboxd migration 0005 (SQLite): the indexes of the per-row claim, dropped.
--
-- The host reads the table's one partition through the status index `idx_<table>_pending`; the
-- retry, lease and room indexes served only the per-row claim of earlier versions.

DROP INDEX IF EXISTS idx_{{table}}_retry;
DROP INDEX IF EXISTS idx_{{table}}_lease;
DROP INDEX IF EXISTS idx_{{table}}_room;
