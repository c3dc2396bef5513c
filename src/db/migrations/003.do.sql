-- Durable disables and the audit trail (docs/interfaces.md §9). Runs against the platform's live
-- database: new tables only, and a short lock_timeout so that nothing here ever waits in the lock
-- queue of a busy table (a failed run is simply repeated; every statement is idempotent).
SET LOCAL lock_timeout = '3s';

-- One row per agent whose accepted disable is not finished yet. Besides the columns of docs/interfaces.md §9:
-- claim_token fences every write of the run that holds the claim, lease_owner names the replica
-- (for SREs), trace_parent links the worker's spans to the request that asked for the disable.
-- next_attempt_at is both the retry time and the lease expiry: a claimed row is not due until
-- its lease runs out, so the claim query also takes over a dead replica's work.
CREATE TABLE IF NOT EXISTS pending_disables (
  agent_id text PRIMARY KEY REFERENCES agents,
  requested_at timestamptz NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  last_error text,
  claim_token uuid,
  lease_owner text,
  trace_parent text
);

-- A table created just above, still empty: nothing to block.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS pending_disables_due_idx ON pending_disables (next_attempt_at);

-- Every status change a request made, repeats included; never updated or deleted by the service.
CREATE TABLE IF NOT EXISTS agent_status_changes (
  change_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_id text NOT NULL,
  network_id uuid NOT NULL,
  enabled boolean NOT NULL,
  partner_name text NOT NULL,
  request_id text,
  changed_at timestamptz NOT NULL DEFAULT now()
);

-- A table created just above, still empty: nothing to block.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS agent_status_changes_agent_idx ON agent_status_changes (agent_id, change_id);
