-- The platform's tables as the interface fixes them (docs/interfaces.md §5). Created only
-- when absent: in production the platform may own them already, and other columns are allowed.
-- Their indexes are built CONCURRENTLY by migrations 007 and 008, so that a live table is never
-- blocked for writes; a lock this file cannot take within 3 s fails it (it is repeated whole).
SET LOCAL lock_timeout = '3s';
CREATE TABLE IF NOT EXISTS networks (
  network_id uuid PRIMARY KEY,
  require_agent_approval boolean NOT NULL DEFAULT false
);

CREATE TABLE IF NOT EXISTS agents (
  agent_id text PRIMARY KEY,
  network_id uuid NOT NULL REFERENCES networks,
  agent_approved boolean NOT NULL DEFAULT true
);

CREATE TABLE IF NOT EXISTS campaigns (
  campaign_id uuid PRIMARY KEY,
  agent_id text NOT NULL REFERENCES agents,
  active boolean NOT NULL DEFAULT true,
  paused boolean NOT NULL DEFAULT false
);
