-- outboxd migration 0003 (SQLite): the room index only where per-room ordering needs it.
--
-- `idx_{{table}}_room (app_code, room_id, status, created_at_ms, event_id)` is read only by the
-- per-room probes of a claim with `worker.ordering = "per-room"`; per-room ordering is off by
-- default, yet every status change rewrote the index's entries (docs/PERFORMANCE.md, "The room
-- index only with per-room ordering"). It is no longer part of the base schema: this migration
-- drops it, and `outboxd migrate` creates it again (over live rows only, as migration 0002 did)
-- when it runs with `worker.ordering = "per-room"` or `--room-index`. A worker with per-room
-- ordering refuses to start on a table without it.
--
-- `outboxd migrate` with the room index (per-room ordering, `--room-index`) records this
-- migration without running it, so a per-room table keeps its index instead of dropping and
-- rebuilding it (`Migration::drops_room_index`).
--
-- Dropping an index is quick (its pages go to the free list); nothing else changes.

DROP INDEX IF EXISTS idx_{{table}}_room;
