-- outboxd migration 0001 (PostgreSQL): the outbox table.
--
-- `{{table}}` is replaced by the configured table name (default `room_outbox`; a plain SQL
-- identifier). `outboxd migrate` applies this file once per table, in the schema first on the
-- connection's search_path, and records it in
-- `outboxd_migrations(table_name, version, applied_at_ms)`.
--
-- Producers in any language write one row per event, in the same transaction as their business
-- change:
--
--   INSERT INTO room_outbox (app_code, event_id, event_type, room_id, status, envelope,
--                            created_at_ms, retry_count, last_error, worker_id, lock_until_ms,
--                            next_retry_at_ms, updated_at_ms)
--   VALUES ($1, $2, $3, $4, 'pending', $5, $6, 0, NULL, '', NULL, 0, $6)  -- updated_at_ms = created_at_ms
--   ON CONFLICT (app_code, event_id) DO NOTHING;
--
-- Everything except the INSERT (claiming, marking, requeueing) belongs to outboxd.
--
-- Statuses: pending → delivering → delivered | retryable (→ delivering again) | failed.
-- Text keys use the "C" collation: byte order, the same as the other databases, for the
-- (created_at_ms, event_id) claim order and exact-match ids.

CREATE TABLE IF NOT EXISTS {{table}} (
    -- Tenant. A claim never mixes tenants; the envelope's app_code must equal it (or be empty).
    app_code         VARCHAR(64)  COLLATE "C" NOT NULL,
    -- Idempotency key, unique per tenant; sinks dedupe redeliveries with it. Saving an id twice
    -- keeps the first row.
    event_id         VARCHAR(128) COLLATE "C" NOT NULL,
    -- Event type (routing key), e.g. RoomGiftSent.
    event_type       VARCHAR(128) COLLATE "C" NOT NULL,
    -- Room; per-room ordering keeps the order of (app_code, room_id).
    room_id          VARCHAR(128) COLLATE "C" NOT NULL,
    -- pending | delivering | retryable | failed | delivered. Producers write 'pending'.
    status           VARCHAR(16)  COLLATE "C" NOT NULL DEFAULT 'pending',
    -- The protobuf outbox.v1.EventEnvelope (proto/outbox/v1/envelope.proto), serialized. A row
    -- whose envelope does not decode goes to 'failed' with the decode error.
    envelope         BYTEA        NOT NULL,
    -- Claim order: UTC milliseconds since the Unix epoch (ties broken by event_id).
    created_at_ms    BIGINT       NOT NULL,
    -- Failed attempts so far, including leases that expired (a worker that died). Producers write 0.
    retry_count      INTEGER      NOT NULL DEFAULT 0,
    -- Why the last attempt failed, at most 512 bytes; NULL when none.
    last_error       VARCHAR(512) NULL,
    -- The worker that claimed the row last; '' until the first claim (and after a requeue).
    worker_id        VARCHAR(128) COLLATE "C" NOT NULL DEFAULT '',
    -- End of the current lease while 'delivering' (UTC ms); NULL when not leased.
    lock_until_ms    BIGINT       NULL,
    -- When a 'retryable' row becomes claimable again (UTC ms); 0 for pending rows.
    next_retry_at_ms BIGINT       NOT NULL DEFAULT 0,
    -- Last change (UTC ms); producers write created_at_ms.
    updated_at_ms    BIGINT       NOT NULL,
    PRIMARY KEY (app_code, event_id)
);

-- Each claim branch reads only the rows it returns, however much delivered history the table
-- holds: every index leads with (app_code, status), so history sits under other keys.
-- Pending branch (ORDER BY created_at_ms, event_id); also failed listings and counts.
CREATE INDEX IF NOT EXISTS idx_{{table}}_pending ON {{table}} (app_code, status, created_at_ms, event_id);
-- Due retryable rows (next_retry_at_ms <= now, ORDER BY next_retry_at_ms, created_at_ms, event_id).
CREATE INDEX IF NOT EXISTS idx_{{table}}_retry ON {{table}} (app_code, status, next_retry_at_ms, created_at_ms, event_id);
-- Expired leases (status 'delivering', lock_until_ms <= now, ORDER BY lock_until_ms, …).
CREATE INDEX IF NOT EXISTS idx_{{table}}_lease ON {{table}} (app_code, status, lock_until_ms, created_at_ms, event_id);
-- Per-room ordering: each room's head (its oldest event of a status), and "is an earlier event of
-- this room still pending, retryable or delivering?". Migration 0004 drops it unless per-room
-- ordering asks for it (`outboxd migrate --room-index`).
CREATE INDEX IF NOT EXISTS idx_{{table}}_room ON {{table}} (app_code, status, room_id, created_at_ms, event_id);
