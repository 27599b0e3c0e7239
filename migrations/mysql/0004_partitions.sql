-- outboxd migration 0004 (MySQL/MariaDB): partitions of rooms, owned by hosts.
--
-- Every row belongs to one of 64 partitions, the virtual column `outbox_partition =
-- CRC32(room_id) & 63`, computed by the database from the row itself: rows written by any
-- producer (the Go service's included, which names its columns) need no change, and a room lives
-- in one partition. The index on it (tenant, partition, status, write order) is what a host reads
-- a partition's due rows from, without writing them.
--
-- Hosts lease partitions in `<table>_partitions` (owner, epoch, lease_until_ms on the database's
-- clock) and announce themselves in `<table>_hosts`; marks are fenced on the partition's owner
-- and epoch.
--
-- Online: a virtual column is added without copying the table (ALGORITHM=INSTANT where the server
-- can, else INPLACE) and the index is built in place with LOCK=NONE: producers keep writing.
-- Each step checks the catalog first, so a run after an interruption goes on where it stopped
-- (MySQL has no ADD COLUMN IF NOT EXISTS).

CREATE TABLE IF NOT EXISTS {{table}}_partitions (
    app_code       VARCHAR(64)  NOT NULL,
    partition_id   INT          NOT NULL,
    owner          VARCHAR(191) NULL,
    epoch          BIGINT       NOT NULL DEFAULT 0,
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (app_code, partition_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {{table}}_hosts (
    app_code       VARCHAR(64)  NOT NULL,
    host_id        VARCHAR(191) NOT NULL,
    alive_until_ms BIGINT       NOT NULL,
    PRIMARY KEY (app_code, host_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
SET @outboxd_add_partition = (
    SELECT IF(COUNT(*) = 0,
        'ALTER TABLE {{table}} ADD COLUMN outbox_partition SMALLINT AS (CRC32(room_id) & 63) VIRTUAL',
        'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND column_name = 'outbox_partition'
);
PREPARE outboxd_add_partition FROM @outboxd_add_partition;
EXECUTE outboxd_add_partition;
DEALLOCATE PREPARE outboxd_add_partition;
SET @outboxd_partition_index = (
    SELECT IF(COUNT(*) = 0,
        'CREATE INDEX idx_{{table}}_part ON {{table}} (app_code, outbox_partition, status, created_at_ms, event_id) ALGORITHM=INPLACE LOCK=NONE',
        'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{table}}' AND index_name = 'idx_{{table}}_part'
);
PREPARE outboxd_partition_index FROM @outboxd_partition_index;
EXECUTE outboxd_partition_index;
DEALLOCATE PREPARE outboxd_partition_index;
