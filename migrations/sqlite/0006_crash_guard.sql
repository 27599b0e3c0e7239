-- outboxd migration 0006 (SQLite): the crash guard's state, per partition.
--
-- A host reads rows without writing them, so a host that dies mid-publish leaves no trace of the
-- rows it had in flight. The partition's next owner, taking it over from a lease that ran out,
-- delivers its first rows in smaller and smaller batches, down to one row announced first
-- (`suspect_event_id`): a row that kills every host publishing it ends `failed`, the others are
-- delivered (docs/operate/partitions.md).

ALTER TABLE {{table}}_partitions ADD COLUMN careful_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{table}}_partitions ADD COLUMN careful_left INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{table}}_partitions ADD COLUMN suspect_event_id TEXT;
