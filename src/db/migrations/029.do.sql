-- The view agent_events (022) read in position order with a LIMIT, a page of a batch at a time
-- (src/stores/event-batches.ts): each branch is now a plain scan of its table, so the planner
-- merges the two primary keys in order and stops at the page's last row. In 022 the namespace was
-- a cross join and the change rows had a filter, which kept the branches from being merged: every
-- page read and sorted the rest of its batch (a 20,000-event batch in pages of 1,000 read 210,000
-- rows). The namespace is now a scalar subquery (computed once a statement). The change rows
-- written before 022 (xid NULL) stay in the view; every reader selects by xid (a range, an
-- equality or pg_visible_in_snapshot), which a NULL never satisfies, so none of them is an event.
-- Same columns, same names and types: CREATE OR REPLACE VIEW replaces it in place.
SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE VIEW agent_events AS
SELECT s.change_id AS position, s.xid, md5((SELECT n.id FROM event_namespace n)::text || '/' || s.change_id)::uuid AS event_id,
       s.agent_id, s.network_id,
       CASE WHEN s.enabled THEN 'agent.enabled' ELSE 'agent.disabled' END AS type,
       s.enabled, s.agent_seq, NULL::integer AS paused_count, s.changed_at AS event_time
  FROM agent_status_changes s
UNION ALL
SELECT c.position, c.xid, md5((SELECT n.id FROM event_namespace n)::text || '/' || c.position)::uuid,
       c.agent_id, c.network_id, 'agent.disable.completed', false, c.agent_seq, c.paused_count, c.completed_at
  FROM disable_completions c;
