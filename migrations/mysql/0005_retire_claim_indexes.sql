-- outboxd migration 0005 (MySQL/MariaDB): the indexes of the per-row claim, dropped.
--
-- Hosts own partitions of rooms and read them through the partition index (migration 0004); the
-- retry, lease and room indexes served only the per-row claim of earlier versions. Counts,
-- retention, the failed listings and the console read the status index `idx_<table>_pending`,
-- which stays.
--
-- Online: InnoDB drops a secondary index in place without blocking writers. Each drop checks the
-- catalog first (MySQL has no DROP INDEX IF EXISTS), so the file is safe to run again. Hosts of
-- an earlier version still running read the status index instead: slower, never wrong
-- (docs/operate/upgrade.md).

SET @outboxd_drop_retry = (
    SELECT IF(COUNT(*) > 0, 'DROP INDEX idx_{{table}}_retry ON {{table}}', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND index_name = 'idx_{{table}}_retry'
);
PREPARE outboxd_drop_retry FROM @outboxd_drop_retry;
EXECUTE outboxd_drop_retry;
DEALLOCATE PREPARE outboxd_drop_retry;
SET @outboxd_drop_lease = (
    SELECT IF(COUNT(*) > 0, 'DROP INDEX idx_{{table}}_lease ON {{table}}', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND index_name = 'idx_{{table}}_lease'
);
PREPARE outboxd_drop_lease FROM @outboxd_drop_lease;
EXECUTE outboxd_drop_lease;
DEALLOCATE PREPARE outboxd_drop_lease;
SET @outboxd_drop_room = (
    SELECT IF(COUNT(*) > 0, 'DROP INDEX idx_{{table}}_room ON {{table}}', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND index_name = 'idx_{{table}}_room'
);
PREPARE outboxd_drop_room FROM @outboxd_drop_room;
EXECUTE outboxd_drop_room;
DEALLOCATE PREPARE outboxd_drop_room;
