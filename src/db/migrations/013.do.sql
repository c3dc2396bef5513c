-- lock_timeout is set on the migrator's session (src/db/migrate.ts): a CONCURRENTLY build cannot SET in its file.
-- squawk-ignore-file require-lock-timeout
-- An agent's status history in its own numbering (docs/interfaces.md §11): `before` pages along this
-- index. Unique: 011's trigger never gives one agent's number twice. Built CONCURRENTLY for the same
-- reason as 007's index.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS agent_status_changes_agent_seq_idx
  ON agent_status_changes (agent_id, agent_seq);
