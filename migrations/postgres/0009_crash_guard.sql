-- outboxd migration 0009 (PostgreSQL): the crash guard's state, per partition.
--
-- A host reads rows without writing them, so a host that dies mid-publish leaves no trace of the
-- rows it had in flight. The partition's next owner, taking it over from a lease that ran out,
-- delivers its first rows in smaller and smaller batches, down to one row announced first
-- (`suspect_event_id`): a row that kills every host publishing it ends `failed`, the others are
-- delivered (docs/operate/partitions.md).
--
-- Run outside a transaction, after migration 0007 creates the table; each statement is safe to
-- run again. Adding a column with a constant default rewrites nothing: a 64-row table per tenant.

ALTER TABLE {{table}}_partitions ADD COLUMN IF NOT EXISTS careful_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{table}}_partitions ADD COLUMN IF NOT EXISTS careful_left INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{table}}_partitions ADD COLUMN IF NOT EXISTS suspect_event_id VARCHAR(128);
