-- lock_timeout is set on the migrator's session (src/db/migrate.ts): a CONCURRENTLY build cannot SET in its file.
-- squawk-ignore-file require-lock-timeout
-- Agents by network. Built CONCURRENTLY for the same reason as 007's index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS agents_network_idx ON agents (network_id);
