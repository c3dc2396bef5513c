-- Shared pause calls (docs/interfaces.md §16): one spend-management call of a bulk change carries
-- campaigns of several agents. Each agent's part of such a call keeps its own row in pause_calls
-- (call_key is then the part's own key, its campaigns the agent's), and names the call it was sent
-- in: sent_key, the idempotency key sent, and sent_campaign_ids, the whole call's campaigns in the
-- order sent. A part in doubt is repeated as the whole call it was sent in (the same key, the same
-- campaigns), never as itself alone; only its own campaigns are then settled from the answer. Both
-- NULL: the row is a call of one agent, sent under its own key (as before).
-- Nullable columns without a default: no rewrite, no long lock.
SET LOCAL lock_timeout = '3s';

ALTER TABLE pause_calls ADD COLUMN IF NOT EXISTS sent_key uuid;
ALTER TABLE pause_calls ADD COLUMN IF NOT EXISTS sent_campaign_ids uuid[];
