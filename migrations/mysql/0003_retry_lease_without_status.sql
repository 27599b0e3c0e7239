-- outboxd migration 0003 (MySQL/MariaDB): the retry and lease indexes without the status.
--
-- InnoDB rewrites a secondary index entry only when one of the index's columns changes. With the
-- status in every claim index, each status change rewrote all three (a delete-marked entry and a
-- new one each): 6 index changes per delivered event. outboxd now keeps `next_retry_at_ms` at 0
-- outside 'retryable' and `lock_until_ms` NULL outside 'delivering', and the retry and lease
-- indexes drop the status: (app_code, next_retry_at_ms, …) and (app_code, lock_until_ms, …). A
-- claim then rewrites the pending and lease indexes and a mark the same two: 4 changes per event,
-- and a held-mode delivery 1. The retry branch reads `0 < next_retry_at_ms <= now`, the lease
-- branch `lock_until_ms <= now`: only rows in those states are in these ranges.
--
-- This file brings the rows to that rule (rows an earlier version or the Go service left with a
-- retry time or a lease outside those states; a retryable row without a retry time becomes due at
-- once, as it was). Each UPDATE reads the whole table, at the session's READ COMMITTED: it locks
-- only the rows it changes, and producers keep inserting. Run again, it changes nothing. `migrate`
-- then finds the retry and lease indexes with the columns of migration 0001 and rebuilds them with
-- the new ones (`DROP INDEX`, `CREATE INDEX`: online in InnoDB, producers keep writing).
--
-- Upgrade the hosts first: a host of an earlier version reads the new retry index with
-- `next_retry_at_ms <= now` and no floor, which covers every row of its tenant.

UPDATE {{table}} SET next_retry_at_ms = 0 WHERE status <> 'retryable' AND next_retry_at_ms <> 0;
UPDATE {{table}} SET next_retry_at_ms = 1 WHERE status = 'retryable' AND next_retry_at_ms < 1;
UPDATE {{table}} SET lock_until_ms = NULL WHERE status <> 'delivering' AND lock_until_ms IS NOT NULL;
