-- outboxd migration 0004 (SQLite): the tables of partition ownership. SQLite has one partition
-- (one writer at a time: a second host would only wait for the first), read from the pending,
-- retry and lease indexes the table has; the tables let the same code decide which host serves
-- it.

CREATE TABLE IF NOT EXISTS {{table}}_partitions (
    app_code       TEXT    NOT NULL,
    partition_id   INTEGER NOT NULL,
    owner          TEXT,
    epoch          INTEGER NOT NULL DEFAULT 0,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (app_code, partition_id)
);
CREATE TABLE IF NOT EXISTS {{table}}_hosts (
    app_code       TEXT    NOT NULL,
    host_id        TEXT    NOT NULL,
    alive_until_ms INTEGER NOT NULL,
    PRIMARY KEY (app_code, host_id)
);
