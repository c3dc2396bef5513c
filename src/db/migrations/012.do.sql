-- Numbers the status changes written before 011 (docs/interfaces.md §11): each agent's rows 1..n in
-- change_id order (the order they were committed in: every change statement holds the agent's
-- change lock), and a counter for each such agent that has none yet. A counter the trigger of 011
-- made meanwhile (a change since 011 committed) already counts these rows and is kept.
--
-- On a big table: one statement that rewrites every older change row once (about its size again in
-- WAL and dead tuples until vacuumed), in a transaction of its own that blocks no one: the table is
-- only ROW EXCLUSIVE locked (inserts and reads go on), the service never updates or deletes change
-- rows, and 011's trigger numbers new rows meanwhile without reading these. The migrator's
-- statement_timeout (30 min) bounds it; a run that hits it is rolled back and simply repeated.
SET LOCAL lock_timeout = '3s';

UPDATE agent_status_changes s
   SET agent_seq = n.seq
  FROM (SELECT change_id, row_number() OVER (PARTITION BY agent_id ORDER BY change_id) AS seq
          FROM agent_status_changes
         WHERE agent_seq IS NULL) n
 WHERE s.change_id = n.change_id AND s.agent_seq IS NULL;

INSERT INTO agent_change_counters (agent_id, last_seq)
SELECT agent_id, max(agent_seq) FROM agent_status_changes GROUP BY agent_id
ON CONFLICT (agent_id) DO NOTHING;
