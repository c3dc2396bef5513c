-- Bulk status changes (docs/interfaces.md §16): one row per batch, kept 24 hours, for its resource
-- (GET /partner/agents/status/batch/{batchId}) and for repeats of its Idempotency-Key.
--   changes        the batch's changes in request order, [{"agentId", "enabled"}]
--   results        the answers known so far, by index, {"<i>": {"status", "body"}}: written as each
--                  change answers; a change without one is read as it stands (its change row and
--                  pending disable)
--   key_digest     the Idempotency-Key's digest bound to the network (never the partner's value)
--   body_digest    the digest of the changes, so that a key used with another batch is told apart
--   request_id     the batch's x-request-id, which every change row of the batch carries
-- The index is built on a table this file creates (empty, used by nothing yet): no CONCURRENTLY.
-- squawk-ignore-file require-concurrent-index-creation
SET LOCAL lock_timeout = '3s';

CREATE TABLE IF NOT EXISTS status_batches (
  batch_id uuid PRIMARY KEY,
  network_id uuid NOT NULL,
  request_id text NOT NULL,
  api_version text NOT NULL,
  changes jsonb NOT NULL,
  results jsonb NOT NULL DEFAULT '{}'::jsonb,
  key_digest text,
  body_digest text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS status_batches_key_idx ON status_batches (network_id, key_digest) WHERE key_digest IS NOT NULL;
CREATE INDEX IF NOT EXISTS status_batches_expiry_idx ON status_batches (expires_at);
