-- lock_timeout is set on the migrator's session (src/db/migrate.ts): a CONCURRENTLY build cannot SET in its file.
-- squawk-ignore-file require-lock-timeout
-- The relay's snapshot batches (022): the change rows of the transactions that started after the
-- previous batch's snapshot or were in progress in it, found by range and by equality on xid. Only
-- the rows written since 022 carry one. Built CONCURRENTLY (alone in its file) on the live history.
CREATE INDEX CONCURRENTLY IF NOT EXISTS agent_status_changes_xid_idx ON agent_status_changes (xid) WHERE xid IS NOT NULL;
