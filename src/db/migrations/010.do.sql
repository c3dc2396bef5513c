-- The write-ahead record of pause calls (docs/interfaces.md §9): one row per campaign that a disable
-- has sent, or is about to send, to spend management and whose pause is not yet settled in Redis and
-- the database. The statement that checks a run's claim right before the call writes the rows (so a
-- call is never sent unrecorded); the statement that marks the campaigns paused deletes them. What a
-- run, its claim, its disable or its replica leaves behind (a dependency that failed after the call,
-- an enable, a shutdown, a SIGKILL) is settled by the worker of any replica: call_key is the call's
-- idempotency key, so an in-doubt call is repeated as the same call; confirmed says spend management
-- already answered it paused. next_attempt_at is the row's lease and backoff, as in pending_disables.
-- A new table of the service's own, with no foreign key: writing it never waits on a platform
-- transaction that holds a campaign row. A short lock_timeout keeps this file out of any lock queue.
SET LOCAL lock_timeout = '3s';

CREATE TABLE IF NOT EXISTS sent_pauses (
  campaign_id uuid PRIMARY KEY,
  agent_id text NOT NULL,
  call_key uuid NOT NULL,
  confirmed boolean NOT NULL DEFAULT false,
  sent_at timestamptz NOT NULL DEFAULT now(),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  claim_token uuid,
  lease_owner text,
  last_error text
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);

-- A table created just above, still empty: nothing to block. The worker finds due rows by it.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS sent_pauses_due_idx ON sent_pauses (next_attempt_at);
