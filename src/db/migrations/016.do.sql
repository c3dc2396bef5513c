-- Partner webhooks (docs/interfaces.md §14): the endpoints a network registers, and one delivery per
-- event and endpoint with its attempts. New tables only: a short lock_timeout keeps this file out of
-- any lock queue.
-- The indexes are built on tables this file creates (empty, used by nothing yet): no CONCURRENTLY.
-- squawk-ignore-file require-concurrent-index-creation
SET LOCAL lock_timeout = '3s';

-- One partner endpoint. event_types NULL: every event type. The signing secret is needed in clear
-- to sign (HMAC); previous_secret signs beside it until previous_secret_expires_at (a rotation).
-- failing_since: when the endpoint's first failed attempt after its last success was made (NULL
-- while its latest attempt succeeded); 5 days of nothing but failures disable it.
CREATE TABLE IF NOT EXISTS webhook_endpoints (
  id uuid PRIMARY KEY,
  network_id uuid NOT NULL,
  url text NOT NULL,
  event_types text[],
  enabled boolean NOT NULL DEFAULT true,
  disabled_reason text,
  secret text NOT NULL,
  previous_secret text,
  previous_secret_expires_at timestamptz,
  failing_since timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS webhook_endpoints_network_idx ON webhook_endpoints (network_id);

-- The endpoints each network holds, for the limit of 10: raised by the statement that creates one
-- (only below the limit, on the row's latest version, so two creates at once cannot both pass),
-- lowered by the one that deletes one.
CREATE TABLE IF NOT EXISTS webhook_endpoint_counts (
  network_id uuid PRIMARY KEY,
  endpoints integer NOT NULL
);

-- One event to one endpoint. body: the exact bytes sent (and signed) on every attempt, so each retry
-- carries the same webhook-id and body. state: pending (an attempt is due at next_attempt_at, or is
-- under way while claim_token holds a lease that ends then), succeeded, or failed (every attempt of
-- the schedule failed, or the endpoint was disabled). A replica killed mid-attempt leaves its lease
-- to run out: the delivery is then due again and any replica takes it.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  endpoint_id uuid NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
  network_id uuid NOT NULL,
  event_id uuid NOT NULL,
  event_type text NOT NULL,
  body text NOT NULL,
  state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'succeeded', 'failed')),
  attempts integer NOT NULL DEFAULT 0,
  -- The attempt count when the retry schedule last started (0; a partner's retry restarts it).
  schedule_start integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  claim_token uuid,
  lease_owner text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (endpoint_id, event_id)
);

-- The sender's claim: due deliveries of one endpoint, oldest first; and those under a lease.
CREATE INDEX IF NOT EXISTS webhook_deliveries_due_idx ON webhook_deliveries (endpoint_id, next_attempt_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_leased_idx ON webhook_deliveries (endpoint_id) WHERE state = 'pending' AND claim_token IS NOT NULL;
-- Finished deliveries by age, for the sender's pruning.
CREATE INDEX IF NOT EXISTS webhook_deliveries_finished_idx ON webhook_deliveries (updated_at) WHERE state <> 'pending';
-- The delivery history of an endpoint, newest first.
CREATE INDEX IF NOT EXISTS webhook_deliveries_history_idx ON webhook_deliveries (endpoint_id, created_at DESC);

-- Every attempt made: when, what came back (status code, or the reason no answer came), how long.
CREATE TABLE IF NOT EXISTS webhook_delivery_attempts (
  delivery_id uuid NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
  attempt integer NOT NULL,
  attempted_at timestamptz NOT NULL,
  status_code integer,
  outcome text NOT NULL,
  duration_ms integer NOT NULL,
  PRIMARY KEY (delivery_id, attempt)
);
