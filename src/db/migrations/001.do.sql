-- The platform's tables as CONTRACT.md section 5 fixes them. Created only when absent: in
-- production the platform may own them already, and other columns are allowed.
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

-- A disable looks up an agent's active, unpaused campaigns: keep that an index range scan
-- even for agents with tens of thousands of campaigns.
CREATE INDEX IF NOT EXISTS campaigns_agent_unpaused_idx
  ON campaigns (agent_id, campaign_id) WHERE active AND NOT paused;

CREATE INDEX IF NOT EXISTS agents_network_idx ON agents (network_id);
