-- outboxd migration 0002 (MySQL ≥ 8.0 / MariaDB ≥ 10.6): the room index only where per-room
-- ordering needs it.
--
-- `idx_{{table}}_room (app_code, room_id, status, created_at_ms, event_id)` is read only by the
-- per-room probes of a claim with `worker.ordering = "per-room"`; per-room ordering is off by
-- default, yet every status change rewrote the index's entry (docs/PERFORMANCE.md, "The room
-- index only with per-room ordering"). It is no longer part of the base schema: this migration
-- drops it, and `outboxd migrate` creates it again when it runs with
-- `worker.ordering = "per-room"` or `--room-index`. A worker with per-room ordering refuses to
-- start on a table without it.
--
-- `outboxd migrate` with the room index (per-room ordering, `--room-index`) records this
-- migration without running it, so a per-room table keeps its index instead of dropping and
-- rebuilding it (`Migration::drops_room_index`).
--
-- MySQL commits DDL implicitly, so this step must be safe to run again: MySQL 8.0 has no
-- `DROP INDEX IF EXISTS`, so the DROP runs only when the catalog lists the index (otherwise a
-- no-op `DO 0`). InnoDB drops a secondary index in place, without copying the table.

SET @outboxd_drop_room_index = (
    SELECT IF(COUNT(*) > 0, 'DROP INDEX idx_{{table}}_room ON {{table}}', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}'
      AND index_name = 'idx_{{table}}_room'
);
PREPARE outboxd_drop_room_index FROM @outboxd_drop_room_index;
EXECUTE outboxd_drop_room_index;
DEALLOCATE PREPARE outboxd_drop_room_index;
