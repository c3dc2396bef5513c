-- Restrictions while an agent is disabled (docs/interfaces.md §5): when the agent's network
-- has require_agent_approval and the agent is not approved, the database itself refuses the
-- restricted operations it can see, and tells the platform's other operations through
-- agent_is_restricted().
SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE FUNCTION agent_is_restricted(p_agent_id text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT NOT a.agent_approved AND n.require_agent_approval
       FROM agents a JOIN networks n USING (network_id)
      WHERE a.agent_id = p_agent_id),
    false)
$$;

CREATE OR REPLACE FUNCTION refuse_campaign_change_of_restricted_agent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF agent_is_restricted(NEW.agent_id) THEN
      RAISE EXCEPTION 'agent % is restricted: cannot create campaigns while not approved', NEW.agent_id
        USING ERRCODE = 'P0001', HINT = 'restriction: create_campaign';
    END IF;
  ELSIF OLD.paused AND NOT NEW.paused THEN
    IF agent_is_restricted(NEW.agent_id) THEN
      RAISE EXCEPTION 'agent % is restricted: cannot unpause campaigns while not approved', NEW.agent_id
        USING ERRCODE = 'P0001', HINT = 'restriction: unpause_campaign';
    END IF;
  END IF;
  RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS campaigns_restricted_agent ON campaigns;
CREATE TRIGGER campaigns_restricted_agent
  BEFORE INSERT OR UPDATE OF paused ON campaigns
  FOR EACH ROW EXECUTE FUNCTION refuse_campaign_change_of_restricted_agent();
