-- lock_timeout is set on the migrator's session (src/db/migrate.ts): a CONCURRENTLY build cannot SET in its file.
-- squawk-ignore-file require-lock-timeout
-- A disable walks an agent's active, unpaused campaigns in campaign order: an index range scan even
-- for agents with tens of thousands of campaigns. Built CONCURRENTLY (alone in its file: it cannot
-- run in the implicit transaction of a multi-statement file), so writes to the platform's live
-- campaigns table go on meanwhile; the migrator's session sets lock_timeout and statement_timeout
-- and drops an invalid index left by an interrupted build before it tries again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS campaigns_agent_unpaused_idx
  ON campaigns (agent_id, campaign_id) WHERE active AND NOT paused;
