-- Events (docs/interfaces.md §14): the transactional outbox. Only the service's own tables: a short
-- lock_timeout keeps this file out of any lock queue.
SET LOCAL lock_timeout = '3s';

-- One row per event, written by the statement that writes its fact (a change row, a finished
-- disable) and so committed or rolled back with it. id is the CloudEvent's id; position orders one
-- agent's events (every statement that writes one holds the agent's change lock until its commit,
-- so an agent's positions are taken in commit order). lease_until is a relay's claim, relayed_at is
-- set once the event is on the broker (or, without one, once the relay has seen it); relayed rows
-- are deleted after a retention.
-- Every event is inserted once, updated once or twice (claimed, marked) and deleted: autovacuum
-- runs on a fixed number of dead rows rather than a share of a table that stays small, and without
-- cost-based sleeps, so the relay's partial index never drags a long tail of dead entries.
CREATE TABLE IF NOT EXISTS event_outbox (
  id uuid PRIMARY KEY,
  position bigint GENERATED ALWAYS AS IDENTITY,
  network_id uuid NOT NULL,
  agent_id text NOT NULL,
  type text NOT NULL,
  event jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  lease_until timestamptz,
  relayed_at timestamptz
) WITH (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 2000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 5000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 5000,
  autovacuum_vacuum_cost_delay = 0
);

-- Tables created just above, still empty: nothing to block.
-- The relay's claim: an agent's oldest unrelayed event, agents in order of their oldest event.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS event_outbox_unrelayed_idx ON event_outbox (agent_id, position) WHERE relayed_at IS NULL;
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS event_outbox_unrelayed_position_idx ON event_outbox (position) WHERE relayed_at IS NULL;
-- The pruning of relayed rows, oldest first.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS event_outbox_relayed_idx ON event_outbox (relayed_at) WHERE relayed_at IS NOT NULL;

-- Campaigns paused on behalf of a pending disable, by the request's run and the worker together
-- (the statements that mark campaigns paused add to it): the completion event's count. A constant
-- default: adding it rewrites nothing.
ALTER TABLE pending_disables ADD COLUMN IF NOT EXISTS paused_count integer NOT NULL DEFAULT 0;

-- The completion event of a disable whose pending row the calling statement deletes. The caller
-- holds the agent's change lock, taken before the pending row's; VOLATILE (and plpgsql, never
-- inlined), so its query sees every change committed before the lock was granted, not only those
-- of the caller's snapshot: the completion names the agent's latest disable and takes its position
-- after it. Returns the event's id.
CREATE OR REPLACE FUNCTION public.record_disable_completion(p_agent_id text, p_paused integer, p_source text, p_type text)
RETURNS uuid
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  event_id uuid := gen_random_uuid();
BEGIN
  INSERT INTO public.event_outbox (id, network_id, agent_id, type, event)
  SELECT event_id, s.network_id, s.agent_id, 'agent.disable.completed',
         jsonb_build_object(
           'specversion', '1.0',
           'id', event_id,
           'source', p_source,
           'type', p_type,
           'subject', s.agent_id,
           'time', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
           'datacontenttype', 'application/json',
           'data', jsonb_build_object(
             'agentId', s.agent_id,
             'networkId', s.network_id,
             'enabled', false,
             'changeId', s.agent_seq,
             'pausedCampaignCount', p_paused))
    FROM public.agent_status_changes s
   WHERE s.agent_id = p_agent_id AND NOT s.enabled
   ORDER BY s.agent_seq DESC
   LIMIT 1;
  RETURN event_id;
END
$$;

-- The pending disable an enable supersedes, deleted with a snapshot of its own. The enable's
-- statement takes the agent's change lock after its snapshot: a disable that committed while the
-- enable waited for that lock has a pending row the statement's snapshot does not show, and which
-- the enable must delete all the same (it comes after that disable). VOLATILE plpgsql, so the DELETE
-- sees every row committed before the lock was granted. Whether it deleted one.
CREATE OR REPLACE FUNCTION public.supersede_pending_disable(p_agent_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  DELETE FROM public.pending_disables WHERE agent_id = p_agent_id;
  RETURN FOUND;
END
$$;
