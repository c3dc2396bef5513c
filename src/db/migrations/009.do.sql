-- Idempotency keys of the status change (docs/interfaces.md §11). A new table of the service's own:
-- nothing else reads or writes it, and a short lock_timeout keeps this file out of any lock queue.
SET LOCAL lock_timeout = '3s';

-- One row per (network, key) for 24 hours from the first request that used it. While that request
-- runs, state is 'running' and the row holds its claim: claim_token fences the writes of that
-- request, lease_until bounds it, so that a replica killed between recording the key and answering
-- leaves a claim that a repeat takes over once the lease has run out. change_id is the
-- agent_status_changes row the request appended (written by the same statement): a repeat that
-- takes over a claim whose change was made answers without making it again. Once answered with a
-- final status, state is 'done' and status, headers (JSON text) and body (text, byte for byte) are
-- what a repeat gets again. The key itself is the partner's value, never an API key.
CREATE TABLE IF NOT EXISTS idempotency_keys (
  network_id uuid NOT NULL,
  idempotency_key text NOT NULL,
  agent_id text NOT NULL,
  enabled boolean NOT NULL,
  state text NOT NULL CHECK (state IN ('running', 'done')),
  claim_token uuid,
  lease_until timestamptz,
  change_id bigint,
  status integer,
  headers text,
  body text,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (network_id, idempotency_key)
);

-- A table created just above, still empty: nothing to block. The clean-up of expired keys walks it.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS idempotency_keys_created_idx ON idempotency_keys (created_at);
