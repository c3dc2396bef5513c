-- record_disable_completion (024) planned its last query on every call: the query read the function's
-- variable `made`, so PL/pgSQL's plan cache planned it for each value (a plan for one value drops the
-- `made IS NOT NULL` test, which looks cheaper than the plan for any value). It is called once for
-- each disable that completes. pg_stat_statements in the bulk benchmark: 9,017 plans for 9,010 calls,
-- 0.1 ms of planning a call, three times what the query itself took. The namespace is now read by a
-- query without a variable (planned once a session) and the id computed from it. Same signature,
-- same result: NULL when nothing was inserted or no namespace row exists, md5 of both otherwise.
SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE FUNCTION public.record_disable_completion(p_agent_id text, p_paused integer, p_source text, p_type text)
RETURNS uuid
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  made bigint;
  namespace uuid;
BEGIN
  INSERT INTO public.disable_completions (agent_id, network_id, agent_seq, paused_count)
  SELECT s.agent_id, s.network_id, s.agent_seq, p_paused
    FROM public.agent_status_changes s
   WHERE s.agent_id = p_agent_id AND NOT s.enabled
   ORDER BY s.agent_seq DESC
   LIMIT 1
  RETURNING position INTO made;
  IF made IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT n.id INTO namespace FROM public.event_namespace n;
  RETURN md5(namespace::text || '/' || made)::uuid;
END
$$;
