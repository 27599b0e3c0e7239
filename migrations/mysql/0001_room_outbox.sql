-- outboxd migration 0001 (MySQL ≥ 8.0 / MariaDB ≥ 10.6): the outbox table.
--
-- `{{table}}` is replaced by the configured table name (default `room_outbox`; a plain SQL
-- identifier). `outboxd migrate` applies this file once per table and records it in
-- `outboxd_migrations(table_name, version, applied_at_ms)`. MySQL commits DDL implicitly, so the
-- statement is written to be safe to run again.
--
-- Producers in any language write one row per event, in the same transaction as their business
-- change (the Go room-service's INSERT is compatible):
--
--   INSERT INTO room_outbox (app_code, event_id, event_type, room_id, status, envelope,
--                            created_at_ms, retry_count, last_error, worker_id, lock_until_ms,
--                            next_retry_at_ms, updated_at_ms)
--   VALUES (?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?)   -- updated_at_ms = created_at_ms
--   ON DUPLICATE KEY UPDATE event_id = event_id;
--
-- (Not INSERT IGNORE: it would also swallow errors other than the duplicate key.) Everything
-- except the INSERT (claiming, marking, requeueing) belongs to outboxd.
--
-- Statuses: pending → delivering → delivered | retryable (→ delivering again) | failed.
-- InnoDB, utf8mb4 with the binary collation: ids compare exactly (case-sensitive) and sort in
-- byte order, like the other databases. VARCHAR sizes keep every index under InnoDB's 3072-byte
-- key limit (the widest, idx_…_room, is 1352 bytes).

CREATE TABLE IF NOT EXISTS {{table}} (
    -- Tenant. A claim never mixes tenants; the envelope's app_code must equal it (or be empty).
    app_code         VARCHAR(64)  NOT NULL,
    -- Idempotency key, unique per tenant; sinks dedupe redeliveries with it. Saving an id twice
    -- keeps the first row.
    event_id         VARCHAR(128) NOT NULL,
    -- Event type (routing key), e.g. RoomGiftSent.
    event_type       VARCHAR(128) NOT NULL,
    -- Room; per-room ordering keeps the order of (app_code, room_id).
    room_id          VARCHAR(128) NOT NULL,
    -- pending | delivering | retryable | failed | delivered. Producers write 'pending'.
    status           VARCHAR(16)  NOT NULL DEFAULT 'pending',
    -- The protobuf outbox.v1.EventEnvelope (proto/outbox/v1/envelope.proto), serialized. A row
    -- whose envelope does not decode goes to 'failed' with the decode error.
    envelope         LONGBLOB     NOT NULL,
    -- Claim order: UTC milliseconds since the Unix epoch (ties broken by event_id).
    created_at_ms    BIGINT       NOT NULL,
    -- Failed attempts so far, including leases that expired (a worker that died). Producers write 0.
    retry_count      INT          NOT NULL DEFAULT 0,
    -- Why the last attempt failed, at most 512 bytes; NULL when none.
    last_error       VARCHAR(512) NULL,
    -- The worker that claimed the row last; '' until the first claim (and after a requeue).
    worker_id        VARCHAR(128) NOT NULL DEFAULT '',
    -- End of the current lease while 'delivering' (UTC ms); NULL when not leased.
    lock_until_ms    BIGINT       NULL,
    -- When a 'retryable' row becomes claimable again (UTC ms); 0 for pending rows.
    next_retry_at_ms BIGINT       NOT NULL DEFAULT 0,
    -- Last change (UTC ms); producers write created_at_ms.
    updated_at_ms    BIGINT       NOT NULL,
    PRIMARY KEY (app_code, event_id),
    -- Each claim branch reads only the rows it returns, however much delivered history the table
    -- holds: history sits under other keys.
    -- Pending branch (ORDER BY created_at_ms, event_id); also failed listings and counts.
    KEY idx_{{table}}_pending (app_code, status, created_at_ms, event_id),
    -- Due retryable rows (0 < next_retry_at_ms <= now, ORDER BY next_retry_at_ms, created_at_ms,
    -- event_id). Without the status: outboxd keeps next_retry_at_ms 0 outside 'retryable', so a
    -- status change of any other kind leaves this index alone (migration 0003).
    KEY idx_{{table}}_retry (app_code, next_retry_at_ms, created_at_ms, event_id),
    -- Expired leases (lock_until_ms <= now, ORDER BY lock_until_ms, …). Without the status:
    -- lock_until_ms is NULL outside 'delivering'.
    KEY idx_{{table}}_lease (app_code, lock_until_ms, created_at_ms, event_id),
    -- Per-room ordering: each room's head (its oldest event of a status), and "is an earlier
    -- event of this room still pending, retryable or delivering?". Migration 0002 drops it
    -- unless per-room ordering asks for it (`outboxd migrate --room-index`).
    KEY idx_{{table}}_room (app_code, status, room_id, created_at_ms, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
