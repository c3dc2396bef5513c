-- Events without a second row per change (docs/interfaces.md §14, docs/events-order.md): the history
-- row is the event. Each change row and each completion carries the id of the transaction that wrote
-- it; the relay reads them in snapshot batches (every row committed between the snapshot of the
-- previous batch and the current one) and records each batch. 023 builds the xid index CONCURRENTLY.
-- A short lock_timeout keeps this file out of any lock queue.
SET LOCAL lock_timeout = '3s';

-- The writing transaction's id (epoch-qualified, so it keeps growing across wraparound and on a
-- promoted standby). Nullable, the default set apart: on a live table neither statement rewrites a
-- row. Rows written before this migration keep NULL: their events went through event_outbox.
ALTER TABLE agent_status_changes ADD COLUMN IF NOT EXISTS xid xid8;
-- Setting a default is safe to run again.
-- squawk-ignore prefer-robust-stmts
ALTER TABLE agent_status_changes ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
-- An event's `time` is as close to its commit as the statement allows: the default is read when the
-- row is formed, after the agent's change lock was granted (the statements insert the row after
-- that lock), so an enable that waited for a disable's lock is stamped after that disable's commit.
-- squawk-ignore prefer-robust-stmts
ALTER TABLE agent_status_changes ALTER COLUMN changed_at SET DEFAULT clock_timestamp();

-- The deployment's namespace of event ids: drawn once per database, so two databases (a sandbox and
-- production, a fresh dev database against the same stream) never give one event id to two events.
-- An event's id is md5(namespace || '/' || position)::uuid (see agent_events below). A database
-- restored from another's dump to serve as a different deployment draws a new one (docs/runbook.md).
CREATE TABLE IF NOT EXISTS event_namespace (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id uuid NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO event_namespace DEFAULT VALUES ON CONFLICT DO NOTHING;

-- A disable that completed (its pending row deleted with nothing left to pause): insert-only.
-- position comes from the change rows' own sequence, taken under the agent's change lock like the
-- change rows' (the completing statement holds it): an agent's completion is numbered after its
-- disable and before its next change, so one number orders both kinds (docs/events-order.md).
-- agent_seq: the number of the disable it completes among the agent's changes.
CREATE TABLE IF NOT EXISTS disable_completions (
  position bigint PRIMARY KEY DEFAULT nextval('agent_status_changes_change_id_seq'),
  agent_id text NOT NULL,
  network_id uuid NOT NULL,
  agent_seq bigint NOT NULL,
  paused_count integer NOT NULL,
  completed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  xid xid8 NOT NULL DEFAULT pg_current_xact_id()
) WITH (autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000);
-- A table created just above, still empty: nothing to block.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS disable_completions_xid_idx ON disable_completions (xid);
-- Pruning by age.
-- squawk-ignore require-concurrent-index-creation
CREATE INDEX IF NOT EXISTS disable_completions_completed_idx ON disable_completions (completed_at);

-- Every event the relay may read, one row each: the change rows and the completions written since
-- this migration. position orders an agent's events (its commit order); the feed and the relay order
-- a batch by it. type without the project's prefix.
CREATE OR REPLACE VIEW agent_events AS
SELECT s.change_id AS position, s.xid, md5(n.id::text || '/' || s.change_id)::uuid AS event_id,
       s.agent_id, s.network_id,
       CASE WHEN s.enabled THEN 'agent.enabled' ELSE 'agent.disabled' END AS type,
       s.enabled, s.agent_seq, NULL::integer AS paused_count, s.changed_at AS event_time
  FROM agent_status_changes s CROSS JOIN event_namespace n
 WHERE s.xid IS NOT NULL
UNION ALL
SELECT c.position, c.xid, md5(n.id::text || '/' || c.position)::uuid,
       c.agent_id, c.network_id, 'agent.disable.completed', false, c.agent_seq, c.paused_count, c.completed_at
  FROM disable_completions c CROSS JOIN event_namespace n;

-- One row per batch the relay took: the snapshot it was read with. Batch n holds every event visible
-- in batch n's snapshot and not in batch n-1's. Row 0 is a starting point: 024 moves it to its own
-- snapshot, where the outbox stops (events committed before it are the outbox's). events,
-- first_position, last_position and oldest_time describe the batch; created_at is when it was taken.
-- Pruned by age, the latest batch always kept.
CREATE TABLE IF NOT EXISTS event_batches (
  id bigint PRIMARY KEY,
  snapshot pg_snapshot NOT NULL,
  events integer NOT NULL,
  first_position bigint,
  last_position bigint,
  oldest_time timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO event_batches (id, snapshot, events) VALUES (0, pg_current_snapshot(), 0) ON CONFLICT DO NOTHING;

-- The relay's leases: 'batches' (takes the batches and makes their webhook deliveries) and 'nats'
-- (publishes the batches to JetStream; only a replica with EVENTS_NATS_URL takes it). One holder
-- each at a time, by row, so the lease works through PgBouncer in transaction mode; a holder that
-- dies leaves it to run out.
CREATE TABLE IF NOT EXISTS event_relay_leases (
  role text PRIMARY KEY,
  holder text,
  token uuid,
  until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO event_relay_leases (role) VALUES ('batches'), ('nats') ON CONFLICT DO NOTHING;

-- How far each consumer of the batches got: the last batch it finished and, within the batch under
-- way, the last position it published (NULL: none yet). The webhooks need no row: their deliveries
-- are made in the transaction that records the batch.
CREATE TABLE IF NOT EXISTS event_consumers (
  name text PRIMARY KEY,
  batch_id bigint NOT NULL,
  position bigint,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO event_consumers (name, batch_id) VALUES ('nats', 0) ON CONFLICT DO NOTHING;
