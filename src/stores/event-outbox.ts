import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { postgresCall, seconds } from './postgres.js';
import { deliveriesOf } from './webhook-deliveries.js';

/**
 * The transactional outbox of migration 015, closed by migration 024: the rows it still holds from
 * before (events committed before the snapshot batches of src/stores/event-batches.ts) are claimed,
 * marked and pruned by the relay (src/events/event-relay.ts) until none is left; nothing new is
 * written to it. The statements that finish a disable call `completionEvent`, whose function
 * (migration 024) writes a row of disable_completions.
 */

/** The project's prefix of CloudEvents `type`: `partner-agent-status.agent.disabled` and so on. */
export const eventTypePrefix = 'partner-agent-status.';

/**
 * A call that writes the completion event of the disable whose pending row the statement deletes
 * (`paused`: campaigns paused on its behalf): a row of disable_completions, numbered after that
 * disable (docs/events-order.md). The statement must hold the agent's change lock (`changeLock` of
 * src/stores/postgres.ts) before it locks the pending row; the function (migration 024) reads the
 * agent's latest disable with a snapshot of its own.
 */
export const completionEvent = (
  agentId: ReturnType<typeof sql.fragment> | string,
  paused: ReturnType<typeof sql.fragment>,
  source: string,
) =>
  sql.fragment`public.record_disable_completion(${agentId}, (${paused})::int, ${source}::text, ${`${eventTypePrefix}agent.disable.completed`}::text)`;

const claimedRow = z.object({
  id: z.string(),
  network_id: z.string(),
  agent_id: z.string(),
  type: z.string(),
  event: z.string(),
  age_seconds: z.number(),
});
const markedRow = z.object({ n: z.number() });
const statsRow = z.object({ backlog: z.number(), oldest_age_seconds: z.number() });

/** An event claimed by a relay: the CloudEvent as stored, and where it goes. */
export interface OutboxEvent {
  id: string;
  networkId: string;
  agentId: string;
  /** The type without the project's prefix (`agent.disabled`): the subject's last part. */
  type: string;
  /** The CloudEvent as stored, JSON text: published as it is. */
  event: string;
  /** Seconds from the event's row being written to the claim, by the database's clock. */
  ageSeconds: number;
}

export interface EventOutbox {
  /**
   * Claims up to `limit` events for `leaseMs`, each the oldest unrelayed event of its agent (so an
   * agent's event is never handed out before its earlier ones were relayed), agents in order of
   * that event. A per-row flag, not a cursor: an event committed late by a long transaction is
   * claimed whenever it becomes visible. SKIP LOCKED lets the relays of several replicas share the
   * work; a claim whose replica died passes to another when its lease runs out.
   */
  claim(limit: number, leaseMs: number): Promise<OutboxEvent[]>;
  /** Records the events as relayed (published and acknowledged, or no broker); how many it marked. */
  markRelayed(ids: readonly string[]): Promise<number>;
  /** Gives claimed events back, due again after `delayMs` (a publish that failed). */
  release(ids: readonly string[], delayMs: number): Promise<void>;
  /** Deletes up to `limit` events relayed more than `retentionMs` ago; how many. */
  prune(retentionMs: number, limit: number): Promise<number>;
  /** Events not relayed yet, and the age of the oldest (seconds; 0 when none). */
  backlog(): Promise<{ count: number; oldestAgeSeconds: number }>;
}

export function createEventOutbox(pool: DatabasePool, metrics: Metrics): EventOutbox {
  const timed = postgresCall(metrics);
  return {
    claim: (limit, leaseMs) =>
      timed('claim_outbox_events', async () => {
        // ARRAY(...) makes the locking sub-select run once, so a claim never takes more than `limit` rows.
        const rows = await pool.any(sql.type(claimedRow)`
          UPDATE event_outbox o SET lease_until = now() + ${seconds(leaseMs)}
          WHERE o.id = ANY (ARRAY(
                  SELECT h.id FROM event_outbox h
                  WHERE h.relayed_at IS NULL AND (h.lease_until IS NULL OR h.lease_until <= now())
                    AND NOT EXISTS (SELECT 1 FROM event_outbox e
                                    WHERE e.agent_id = h.agent_id AND e.relayed_at IS NULL AND e.position < h.position)
                  ORDER BY h.position
                  LIMIT ${limit}
                  FOR UPDATE SKIP LOCKED))
            AND o.relayed_at IS NULL
          RETURNING o.id::text AS id, o.network_id::text AS network_id, o.agent_id, o.type, o.event::text AS event,
                    extract(epoch FROM now() - o.created_at)::float8 AS age_seconds`);
        return rows.map((row) => ({
          id: row.id,
          networkId: row.network_id,
          agentId: row.agent_id,
          type: row.type,
          event: row.event,
          ageSeconds: row.age_seconds,
        }));
      }),

    // THE mark statement: the single place where an event becomes relayed. Whatever must happen
    // exactly once per relayed event (the partner webhooks' deliveries, docs/interfaces.md §14) is
    // added to this statement, from the rows `marked` returns, so that it commits with the mark.
    markRelayed: (ids) =>
      timed('mark_outbox_events', async () => {
        const row = await pool.one(sql.type(markedRow)`
          WITH marked AS (
            UPDATE event_outbox SET relayed_at = now(), lease_until = NULL
            WHERE id = ANY(${sql.array(ids, 'uuid')}) AND relayed_at IS NULL
            RETURNING id, network_id, agent_id, type, event
          ), ${deliveriesOf(sql.fragment`SELECT id, network_id, type, event::text AS body FROM marked`)}
          SELECT count(*)::int AS n FROM marked`);
        return row.n;
      }),

    release: (ids, delayMs) =>
      timed('release_outbox_events', async () => {
        await pool.one(sql.type(markedRow)`
          WITH released AS (
            UPDATE event_outbox SET lease_until = now() + ${seconds(delayMs)}
            WHERE id = ANY(${sql.array(ids, 'uuid')}) AND relayed_at IS NULL
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM released`);
      }),

    prune: (retentionMs, limit) =>
      timed('prune_outbox_events', async () => {
        const row = await pool.one(sql.type(markedRow)`
          WITH pruned AS (
            DELETE FROM event_outbox
            WHERE id = ANY (ARRAY(
                    SELECT id FROM event_outbox
                    WHERE relayed_at IS NOT NULL AND relayed_at < now() - ${seconds(retentionMs)}
                    ORDER BY relayed_at
                    LIMIT ${limit}
                    FOR UPDATE SKIP LOCKED))
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM pruned`);
        return row.n;
      }),

    backlog: () =>
      timed('outbox_backlog', async () => {
        const row = await pool.one(sql.type(statsRow)`
          SELECT count(*)::int AS backlog,
                 coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_seconds
          FROM event_outbox WHERE relayed_at IS NULL`);
        return { count: row.backlog, oldestAgeSeconds: row.oldest_age_seconds };
      }),
  };
}
