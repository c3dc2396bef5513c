-- The restriction, closed (docs/interfaces.md §5). While an agent is not approved in a network
-- with require_agent_approval, no campaign of it may come to exist or start running: inserted,
-- moved to the agent, unpaused, or re-activated while unpaused.
--
-- Both functions pin search_path and name every object with its schema, so neither a schema
-- earlier on the caller's search_path nor a temporary table can change their answer. The trigger
-- function reads the agent row FOR SHARE: that conflicts with the disable's UPDATE of the flag,
-- so a campaign written while a disable commits is either refused or committed first (and then
-- seen and paused by the disable). It is SECURITY DEFINER because FOR SHARE needs UPDATE rights
-- on agents, which the platform's roles that write campaigns may not have.
SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE FUNCTION public.agent_is_restricted(p_agent_id text) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(
    (SELECT NOT a.agent_approved AND n.require_agent_approval
       FROM public.agents a JOIN public.networks n ON n.network_id = a.network_id
      WHERE a.agent_id = p_agent_id),
    false)
$$;

CREATE OR REPLACE FUNCTION public.refuse_running_campaign_of_restricted_agent() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  restricted boolean;
  restriction text;
BEGIN
  SELECT NOT a.agent_approved AND n.require_agent_approval INTO restricted
    FROM public.agents a JOIN public.networks n ON n.network_id = a.network_id
   WHERE a.agent_id = NEW.agent_id
     FOR SHARE OF a;
  IF NOT coalesce(restricted, false) THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' THEN
    restriction := 'create_campaign';
  ELSIF NEW.agent_id IS DISTINCT FROM OLD.agent_id THEN
    restriction := 'move_campaign';
  ELSIF OLD.paused AND NOT NEW.paused THEN
    restriction := 'unpause_campaign';
  ELSE
    restriction := 'activate_campaign';
  END IF;
  RAISE EXCEPTION 'agent % is restricted: % is not allowed while the agent is not approved', NEW.agent_id, restriction
    USING ERRCODE = 'P0001', HINT = 'restriction: ' || restriction;
END
$$;

REVOKE ALL ON FUNCTION public.refuse_running_campaign_of_restricted_agent() FROM PUBLIC;

-- Replaces the trigger of migration 002, which saw only INSERT and UPDATE OF paused.
DROP TRIGGER IF EXISTS campaigns_restricted_agent ON public.campaigns;

-- Named to sort last among the table's triggers, so the WHEN clause sees what earlier BEFORE
-- triggers made of the row.
CREATE OR REPLACE TRIGGER zz_campaigns_restricted_agent_insert
  BEFORE INSERT ON public.campaigns
  FOR EACH ROW EXECUTE FUNCTION public.refuse_running_campaign_of_restricted_agent();

-- No column list: UPDATE OF fires on the columns named in SET, not on changed values.
CREATE OR REPLACE TRIGGER zz_campaigns_restricted_agent_update
  BEFORE UPDATE ON public.campaigns
  FOR EACH ROW
  WHEN (NEW.agent_id IS DISTINCT FROM OLD.agent_id
        OR (OLD.paused AND NOT NEW.paused)
        OR (NEW.active AND NOT OLD.active AND NOT NEW.paused))
  EXECUTE FUNCTION public.refuse_running_campaign_of_restricted_agent();

DROP FUNCTION IF EXISTS public.refuse_campaign_change_of_restricted_agent();
