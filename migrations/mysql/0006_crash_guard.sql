-- outboxd migration 0006 (MySQL/MariaDB): the crash guard's state, per partition.
--
-- A host reads rows without writing them, so a host that dies mid-publish leaves no trace of the
-- rows it had in flight. The partition's next owner, taking it over from a lease that ran out,
-- delivers its first rows in smaller and smaller batches, down to one row announced first
-- (`suspect_event_id`): a row that kills every host publishing it ends `failed`, the others are
-- delivered (docs/operate/partitions.md).
--
-- One ALTER adds the three columns (all or none); it checks the catalog first, so a run after an
-- interruption goes on (MySQL has no ADD COLUMN IF NOT EXISTS).

SET @outboxd_crash_guard = (
    SELECT IF(COUNT(*) = 0,
        'ALTER TABLE {{table}}_partitions ADD COLUMN careful_size INT NOT NULL DEFAULT 0, ADD COLUMN careful_left INT NOT NULL DEFAULT 0, ADD COLUMN suspect_event_id VARCHAR(128) NULL',
        'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{table}}_partitions' AND column_name = 'careful_size'
);
PREPARE outboxd_crash_guard FROM @outboxd_crash_guard;
EXECUTE outboxd_crash_guard;
DEALLOCATE PREPARE outboxd_crash_guard;
