-- outboxd migration 0007 (PostgreSQL): partitions of rooms, owned by hosts.
--
-- Every row belongs to one of 64 partitions, `hashtextextended(room_id, 0) & 63`, computed by the
-- database from the row itself: rows written by any producer (the Go service's included) need no
-- change, and a room lives in one partition. The index below holds live rows only, by tenant,
-- partition, status and write order: a host reads a partition's due rows from it without writing
-- them, and a row leaves it when it is marked `delivered` or `failed`. Its predicate also names
-- `updated_at_ms IS NOT NULL` (always true: the column is NOT NULL), which the partition
-- statements state and no statement of the leased design does, so the planner never reads the
-- leased claims and per-room probes from this index instead of their own (tests/stale_plans.rs).
--
-- Hosts lease partitions in `<table>_partitions` (owner, epoch, lease_until_ms on the database's
-- clock) and announce themselves in `<table>_hosts`; marks are fenced on the partition's owner
-- and epoch.
--
-- Online: run outside a transaction, one statement at a time (`Migration::outside_transaction`).
-- `CREATE INDEX CONCURRENTLY` builds the index while producers and hosts keep writing. Run again
-- after an interruption, it starts the index over.

CREATE TABLE IF NOT EXISTS {{table}}_partitions (
    app_code       VARCHAR(64)  NOT NULL,
    partition_id   INTEGER      NOT NULL,
    owner          VARCHAR(191),
    epoch          BIGINT       NOT NULL DEFAULT 0,
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (app_code, partition_id)
);
CREATE TABLE IF NOT EXISTS {{table}}_hosts (
    app_code       VARCHAR(64)  NOT NULL,
    host_id        VARCHAR(191) NOT NULL,
    alive_until_ms BIGINT       NOT NULL,
    PRIMARY KEY (app_code, host_id)
);
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_part_new;
CREATE INDEX CONCURRENTLY idx_{{table}}_part_new ON {{table}}
    (app_code, (hashtextextended(room_id, 0) & 63), status, created_at_ms, event_id)
    WHERE status IN ('pending', 'retryable', 'delivering') AND updated_at_ms IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS idx_{{table}}_part;
ALTER INDEX idx_{{table}}_part_new RENAME TO idx_{{table}}_part;
