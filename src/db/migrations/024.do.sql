-- Events (docs/events-order.md): the outbox stops here. From this migration's snapshot on, the
-- change rows and disable_completions are the events, read in snapshot batches (022); the outbox
-- rows written before it are still relayed from event_outbox. Short lock_timeout: only the outbox's
-- lock, briefly.
SET LOCAL lock_timeout = '3s';

-- From now on the change statements write no outbox row; a replica still running the previous
-- release (a rolling deploy) writes its change's row all the same: dropped here, since the change
-- row carries the event now. Rows written before this migration stay and are relayed as before.
CREATE OR REPLACE FUNCTION public.drop_new_outbox_rows() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER event_outbox_closed BEFORE INSERT ON event_outbox
  FOR EACH ROW EXECUTE FUNCTION public.drop_new_outbox_rows();

-- The completion of a disable whose pending row the calling statement deletes, now a row of
-- disable_completions (same signature as 015's: the previous release calls it too; source and type
-- are the relay's business now). The caller holds the agent's change lock; VOLATILE plpgsql, so the
-- query sees every change committed before the lock was granted. Returns the event's id.
CREATE OR REPLACE FUNCTION public.record_disable_completion(p_agent_id text, p_paused integer, p_source text, p_type text)
RETURNS uuid
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  made bigint;
BEGIN
  INSERT INTO public.disable_completions (agent_id, network_id, agent_seq, paused_count)
  SELECT s.agent_id, s.network_id, s.agent_seq, p_paused
    FROM public.agent_status_changes s
   WHERE s.agent_id = p_agent_id AND NOT s.enabled
   ORDER BY s.agent_seq DESC
   LIMIT 1
  RETURNING position INTO made;
  RETURN (SELECT md5(n.id::text || '/' || made)::uuid FROM public.event_namespace n WHERE made IS NOT NULL);
END
$$;

-- The webhooks are a consumer of the batches like NATS: the batch statement fans a batch out and
-- moves this cursor at once when it can, a large batch is fanned out page by page.
INSERT INTO event_consumers (name, batch_id) VALUES ('webhooks', 0) ON CONFLICT DO NOTHING;

-- Batch 0 is the snapshot of this statement, taken after the trigger above holds event_outbox's
-- lock: a change committed before it has its outbox row (and is not in any batch), a change
-- committed after it has none (and is in a batch). Only before any batch was taken.
UPDATE event_batches SET snapshot = pg_current_snapshot(), created_at = now()
 WHERE id = 0 AND NOT EXISTS (SELECT 1 FROM event_batches WHERE id > 0);
