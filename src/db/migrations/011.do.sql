-- Per-agent numbers of status changes (docs/interfaces.md §11). The ETag and the history's changeId
-- used to be the table-wide change_id, which moves with every network's changes; they are now the
-- change's number among its agent's changes (1, 2, 3, …), which says nothing about other agents.
-- change_id stays the row's key and what the service's own statements compare.
SET LOCAL lock_timeout = '3s';

-- Nullable and without a default: adding it rewrites nothing. The rows written before this file are
-- numbered by 012 (a transaction of its own, so that no lock of this file is held meanwhile), every
-- later row by the trigger below.
ALTER TABLE agent_status_changes ADD COLUMN IF NOT EXISTS agent_seq bigint;

-- The last number given to each agent's changes: what the ETag names, and where the next one comes
-- from. One row per agent that has changes; a new table of the service's own.
CREATE TABLE IF NOT EXISTS agent_change_counters (
  agent_id text PRIMARY KEY,
  last_seq bigint NOT NULL
);

-- Numbers every new change row in the statement that appends it, whoever appends it (a replica of
-- the previous release during a rolling upgrade included). The counter row is locked by the
-- increment until the statement's transaction ends, so two changes of one agent never get one
-- number; the service's statements take the agent's change lock first anyway. An agent without a
-- counter yet starts after its rows written before this file (numbered 1..n by 012, before or after
-- this runs: the count covers both) — VOLATILE, so the count sees every row committed before it.
CREATE OR REPLACE FUNCTION public.number_agent_status_change() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  UPDATE public.agent_change_counters SET last_seq = last_seq + 1
   WHERE agent_id = NEW.agent_id
  RETURNING last_seq INTO NEW.agent_seq;
  IF NOT FOUND THEN
    INSERT INTO public.agent_change_counters AS k (agent_id, last_seq)
    SELECT NEW.agent_id, coalesce(max(s.agent_seq), 0) + count(*) FILTER (WHERE s.agent_seq IS NULL) + 1
      FROM public.agent_status_changes s
     WHERE s.agent_id = NEW.agent_id
    ON CONFLICT (agent_id) DO UPDATE SET last_seq = k.last_seq + 1
    RETURNING last_seq INTO NEW.agent_seq;
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER agent_status_changes_number
  BEFORE INSERT ON public.agent_status_changes
  FOR EACH ROW EXECUTE FUNCTION public.number_agent_status_change();
