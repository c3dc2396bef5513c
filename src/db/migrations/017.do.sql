-- The call record (docs/interfaces.md §9): one row per pause call a disable sends to spend
-- management, replacing the campaign rows of sent_pauses (migration 010), whose unit could not say
-- which call a campaign belonged to once a retry recorded it again. A row is written by the claim
-- check right before its call, with the call's idempotency key and its exact campaign list, and
-- never rewritten by another call:
--   state 'sent'     the call was allowed to start and its answer has not come (yet): once its lease
--                    (next_attempt_at) runs out it is in doubt, and the worker of any replica sends it
--                    again exactly as it was first sent (same key, same campaigns, one call);
--   state 'answered' spend management answered 200: answered_ids are the campaigns it named that
--                    are not settled yet in Redis and the database; it is never sent again.
-- A call known to have paused nothing (never sent after all, or answered with any other status)
-- has no row: its row is deleted by the run that knows it. The statement that marks a call's
-- campaigns paused deletes its row. A new table with no foreign key: writing it never waits on a
-- platform transaction. A short lock_timeout keeps this file out of any lock queue.
-- The index is built on a table this file creates (empty, used by nothing yet): no CONCURRENTLY.
-- squawk-ignore-file require-concurrent-index-creation
SET LOCAL lock_timeout = '3s';

CREATE TABLE IF NOT EXISTS pause_calls (
  call_key uuid PRIMARY KEY,
  agent_id text NOT NULL,
  campaign_ids uuid[] NOT NULL,
  state text NOT NULL CHECK (state IN ('sent', 'answered')),
  answered_ids uuid[],
  sent_at timestamptz NOT NULL DEFAULT now(),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  claim_token uuid,
  lease_owner text,
  last_error text,
  CHECK ((state = 'answered') = (answered_ids IS NOT NULL))
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);

CREATE INDEX IF NOT EXISTS pause_calls_due_idx ON pause_calls (next_attempt_at);

-- What the campaign record holds moves here, one call per key: a key whose campaigns spend
-- management all confirmed is answered; any other is in doubt, with the campaigns recorded under its
-- key (a retry of the older version may have taken some of them over). Due at once. The old table
-- stays (empty) until a later release drops it.
INSERT INTO pause_calls (call_key, agent_id, campaign_ids, state, answered_ids, sent_at, attempts, next_attempt_at, last_error)
SELECT s.call_key, min(s.agent_id), array_agg(s.campaign_id ORDER BY s.campaign_id),
       CASE WHEN bool_and(s.confirmed) THEN 'answered' ELSE 'sent' END,
       CASE WHEN bool_and(s.confirmed) THEN array_agg(s.campaign_id ORDER BY s.campaign_id) END,
       min(s.sent_at), max(s.attempts), now(), max(s.last_error)
FROM sent_pauses s
GROUP BY s.call_key
ON CONFLICT (call_key) DO NOTHING;

DELETE FROM sent_pauses;
