-- The partner events feed (docs/interfaces.md §17): a recorded batch is announced on the channel
-- `event_batches` (payload: its id) when the relay's statement that records it commits, so each
-- replica's one listener wakes its live streams without polling (docs/events-order.md). A
-- notification is sent at commit only, never for a batch that rolled back; at most one a poll.
-- A short lock_timeout keeps this file out of any lock queue (the trigger takes a lock on event_batches).
SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE FUNCTION public.announce_event_batch() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM pg_notify('event_batches', NEW.id::text);
  RETURN NULL;
END
$$;

-- A trigger on a table only the relay writes, a row at a time: nothing waits on it.
CREATE OR REPLACE TRIGGER event_batches_announced AFTER INSERT ON event_batches
  FOR EACH ROW EXECUTE FUNCTION public.announce_event_batch();
