-- outboxd migration 0007 (MySQL/MariaDB): the status index replaced by one a delivery leaves alone.
--
-- A mark that delivers a row changed two secondary indexes keyed on the status: the partition
-- index (the reads need it) and the status index `idx_<table>_pending` (app_code, status,
-- created_at_ms, event_id), which only counts, retention, the failed listings and the console
-- read. InnoDB rewrites a secondary index entry only when its key changes. The new index keys on
-- the virtual column `outbox_failed = (status = 'failed')`: 0 for a row pending, retryable,
-- delivering or delivered, 1 for a failed one. Delivering a row leaves its entry alone; failed
-- rows stay apart, in write order, for the failed listings and requeues. The live statuses are
-- found through the partition index.
--
-- Online: the virtual column is added without copying the table, the index built in place with
-- LOCK=NONE, the old index dropped in place: producers keep writing. Each step checks the
-- catalog first, so a run after an interruption goes on where it stopped. Hosts of an earlier
-- version still running find failed rows and history through other indexes: slower, never
-- wrong (docs/operate/upgrade.md).

SET @outboxd_add_failed = (
    SELECT IF(COUNT(*) = 0,
        'ALTER TABLE {{table}} ADD COLUMN outbox_failed TINYINT AS (status = ''failed'') VIRTUAL',
        'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND column_name = 'outbox_failed'
);
PREPARE outboxd_add_failed FROM @outboxd_add_failed;
EXECUTE outboxd_add_failed;
DEALLOCATE PREPARE outboxd_add_failed;
SET @outboxd_failed_index = (
    SELECT IF(COUNT(*) = 0,
        'CREATE INDEX idx_{{table}}_failed ON {{table}} (app_code, outbox_failed, created_at_ms, event_id) ALGORITHM=INPLACE LOCK=NONE',
        'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND index_name = 'idx_{{table}}_failed'
);
PREPARE outboxd_failed_index FROM @outboxd_failed_index;
EXECUTE outboxd_failed_index;
DEALLOCATE PREPARE outboxd_failed_index;
SET @outboxd_drop_pending = (
    SELECT IF(COUNT(*) > 0, 'ALTER TABLE {{table}} DROP INDEX idx_{{table}}_pending, ALGORITHM=INPLACE, LOCK=NONE', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND index_name = 'idx_{{table}}_pending'
);
PREPARE outboxd_drop_pending FROM @outboxd_drop_pending;
EXECUTE outboxd_drop_pending;
DEALLOCATE PREPARE outboxd_drop_pending;
