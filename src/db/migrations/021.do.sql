-- lock_timeout is set on the migrator's session (src/db/migrate.ts): a CONCURRENTLY build cannot SET in its file.
-- squawk-ignore-file require-lock-timeout
-- The deliveries each network has waiting (docs/interfaces.md §14), counted up to the network's
-- bound (WEBHOOK_NETWORK_MAX_PENDING) when the fan-out makes new ones: a bounded index-only count,
-- never a scan of the table. Built CONCURRENTLY: webhook_deliveries may already be large.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_network_pending_idx
  ON webhook_deliveries (network_id) WHERE state = 'pending';
