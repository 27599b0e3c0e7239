-- outboxd migration 0004 (PostgreSQL): the room index only where per-room ordering needs it.
--
-- `idx_{{table}}_room (app_code, room_id, status, created_at_ms, event_id)` is read only by the
-- per-room probes of a claim with `worker.ordering = "per-room"`; per-room ordering is off by
-- default, yet every status change wrote a new entry in it (a status change is a new row
-- version, and `status` is a key column: no HOT update), and its history kept growing
-- (docs/PERFORMANCE.md, "The room index only with per-room ordering"). It is no longer part of
-- the base schema: this migration drops it, and `outboxd migrate` creates it again when it runs
-- with `worker.ordering = "per-room"` or `--room-index`. A worker with per-room ordering refuses
-- to start on a table without it.
--
-- `outboxd migrate` with the room index (per-room ordering, `--room-index`) records this
-- migration without running it, so a per-room table keeps its index instead of dropping and
-- rebuilding it (`Migration::drops_room_index`).
--
-- DROP INDEX takes the table's ACCESS EXCLUSIVE lock for a moment (it waits for running
-- transactions on the table, and producers wait behind it); it does not read the table.

DROP INDEX IF EXISTS idx_{{table}}_room;
