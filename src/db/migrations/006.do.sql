-- The restriction's final check runs after every other trigger (issue: a platform BEFORE trigger
-- whose name sorts after ours could still unpause or move a campaign after our check passed).
-- AFTER ROW triggers fire once every BEFORE trigger has shaped the row, so they see what is
-- written; raising there still undoes the statement. The function is the one of migration 004
-- (it reads the agent row FOR SHARE, so a disable's flag and a campaign write still serialise).
SET LOCAL lock_timeout = '3s';

DROP TRIGGER IF EXISTS zz_campaigns_restricted_agent_insert ON public.campaigns;
DROP TRIGGER IF EXISTS zz_campaigns_restricted_agent_update ON public.campaigns;

CREATE OR REPLACE TRIGGER campaigns_restricted_agent_insert
  AFTER INSERT ON public.campaigns
  FOR EACH ROW EXECUTE FUNCTION public.refuse_running_campaign_of_restricted_agent();

-- No column list: UPDATE OF fires on the columns named in SET, not on changed values.
CREATE OR REPLACE TRIGGER campaigns_restricted_agent_update
  AFTER UPDATE ON public.campaigns
  FOR EACH ROW
  WHEN (NEW.agent_id IS DISTINCT FROM OLD.agent_id
        OR (OLD.paused AND NOT NEW.paused)
        OR (NEW.active AND NOT OLD.active AND NOT NEW.paused))
  EXECUTE FUNCTION public.refuse_running_campaign_of_restricted_agent();
