import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { eventTypePrefix } from './event-outbox.js';
import { postgresCall, seconds } from './postgres.js';
import {
  countDropped,
  type DeliveryBound,
  deliveriesOf,
  droppedDeliveries,
  droppedDeliveriesJson,
  maxPendingOf,
} from './webhook-deliveries.js';

/**
 * The events of docs/interfaces.md §14 as the history rows themselves (docs/events-order.md,
 * migrations 022-024): the view `agent_events` read in snapshot batches, each batch recorded in
 * `event_batches` with its webhook deliveries in one statement; the relay's leases (one holder per
 * role and deployment) and the NATS consumer's cursor. The relay (src/events/event-relay.ts) is the
 * only caller.
 */

/** A relay role: `batches` takes the batches (and feeds the webhooks), `nats` publishes them. */
export type RelayRole = 'batches' | 'nats';

/** An event of a batch, as the relay publishes it. */
export interface BatchEvent {
  /** Its place in the order (docs/events-order.md): the change row's id or the completion's position. */
  position: string;
  id: string;
  networkId: string;
  agentId: string;
  /** The type without the project's prefix (`agent.disabled`): the subject's last part. */
  type: string;
  /** The CloudEvent, JSON text: the same bytes to NATS, the webhooks and the feed. */
  event: string;
  /** Seconds from the event's `time` (its commit, within the statement) to its read, by the database's clock. */
  ageSeconds: number;
}

/**
 * A recorded batch: its id, the snapshot it was read with, how many events it holds, and the least
 * and greatest position among them (null for batch 0, the starting point, which holds none).
 */
export interface Batch {
  id: string;
  snapshot: string;
  events: number;
  firstPosition: string | null;
  lastPosition: string | null;
}

const eventRow = z.object({
  position: z.string(),
  id: z.string(),
  networkId: z.string(),
  agentId: z.string(),
  type: z.string(),
  event: z.string(),
  ageSeconds: z.number(),
});
const batchRow = z.object({
  id: z.string(),
  snapshot: z.string(),
  events: z.number(),
  firstPosition: z.string().nullable(),
  lastPosition: z.string().nullable(),
});
const batchColumns = sql.fragment`b.id::text, b.snapshot::text, b.events,
  b.first_position::text AS "firstPosition", b.last_position::text AS "lastPosition"`;
const takenRow = z.object({
  held: z.boolean(),
  id: z.string().nullable(),
  snapshot: z.string().nullable(),
  events: z.number().nullable(),
  first_position: z.string().nullable(),
  last_position: z.string().nullable(),
  rows: z.array(eventRow),
  fanned_out: z.boolean(),
  dropped: droppedDeliveries,
});
const fannedRow = z.object({
  held: z.boolean(),
  n: z.number(),
  batch_id: z.string().nullable(),
  position: z.string().nullable(),
  dropped: droppedDeliveries,
});
const heldRow = z.object({ held: z.boolean() });
const advancedRow = z.object({ held: z.boolean(), moved: z.boolean() });
const countRow = z.object({ n: z.number() });
const cursorRow = z.object({ batch_id: z.string(), position: z.string().nullable() });
const backlogRow = z.object({ count: z.number(), oldest_age_seconds: z.number() });

/**
 * The CloudEvent of a row `e` of agent_events, JSON text (json_build_object keeps the keys in this
 * order, so every reader gets the same bytes).
 */
export const eventJson = (source: string) => sql.fragment`json_build_object(
    'specversion', '1.0',
    'id', e.event_id,
    'source', ${source}::text,
    'type', ${eventTypePrefix}::text || e.type,
    'subject', e.agent_id,
    'time', to_char(e.event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'datacontenttype', 'application/json',
    'data', CASE WHEN e.paused_count IS NULL
      THEN json_build_object('agentId', e.agent_id, 'networkId', e.network_id, 'enabled', e.enabled, 'changeId', e.agent_seq)
      ELSE json_build_object('agentId', e.agent_id, 'networkId', e.network_id, 'enabled', e.enabled, 'changeId', e.agent_seq,
                             'pausedCampaignCount', e.paused_count) END)::text`;

/**
 * Rows of agent_events committed after snapshot `prev` (as far as the statement's own snapshot sees).
 * The range is closed above by the statement's own xmax (every row it sees is below it): a two-sided
 * range keeps the planner on the xid index even before the column has statistics, where an open one
 * is estimated at a third of the history and read by a sequential scan.
 */
const after = (prev: string | ReturnType<typeof sql.fragment>) =>
  sql.fragment`((e.xid >= pg_snapshot_xmax(${prev}::pg_snapshot) AND e.xid < pg_snapshot_xmax(pg_current_snapshot()))
    OR e.xid = ANY (ARRAY(SELECT pg_snapshot_xip(${prev}::pg_snapshot))))`;

/**
 * The rows of a page of recorded batch `batch` after `afterPosition`: read by position (the
 * tables' primary keys), within the least and greatest position the batch recorded, each row kept
 * when it is visible in the batch's snapshot and not in the previous batch's (the batch's very
 * definition). With ORDER BY position and a LIMIT, a page reads from where the last page stopped to
 * its own last row, never the batch again: a big batch (a backlog, a consumer catching up) costs
 * its rows once, where reading it by the xid index cost the whole batch per page (a 20,000-event
 * batch paged by 1,000 read 210,000 rows). The xid tests are functions, never an index condition,
 * so the planner has only the position's order to go by.
 */
const pageOf = (previous: Batch, batch: Batch, afterPosition: string | null) =>
  sql.fragment`e.position >= ${batch.firstPosition ?? '0'}::bigint AND e.position <= ${batch.lastPosition ?? '-1'}::bigint
    AND e.position > ${afterPosition ?? '0'}::bigint
    AND pg_visible_in_snapshot(e.xid, ${batch.snapshot}::pg_snapshot)
    AND NOT pg_visible_in_snapshot(e.xid, ${previous.snapshot}::pg_snapshot)`;

/** The CTE `lease`: the role's lease renewed, only while it is still this replica's (a row: held). */
const renewed = (role: RelayRole, lease: { token: string; leaseMs: number }) => sql.fragment`lease AS (
    UPDATE event_relay_leases SET until = now() + ${seconds(lease.leaseMs)}
    WHERE role = ${role} AND token = ${lease.token}::uuid AND until > now()
    RETURNING 1
  )`;

/** The columns of a BatchEvent from a row `e` of agent_events. */
const eventColumns = (source: string) => sql.fragment`e.position::text AS "position", e.event_id::text AS id,
    e.network_id::text AS "networkId", e.agent_id AS "agentId", e.type, ${eventJson(source)} AS event,
    extract(epoch FROM clock_timestamp() - e.event_time)::float8 AS "ageSeconds"`;

export interface EventBatchStore {
  /** Takes the role's lease for `leaseMs` under `token`, or renews it; whether this replica holds it. */
  acquire(role: RelayRole, holder: string, token: string, leaseMs: number): Promise<boolean>;
  /** Gives the lease back at once (a clean stop), so another replica takes over without waiting. */
  release(role: RelayRole, token: string): Promise<void>;
  /** Whether a replica with a broker ever held the `nats` lease (this deployment publishes to NATS). */
  brokerSeen(): Promise<boolean>;
  /** The latest recorded batch. */
  latest(): Promise<Batch>;
  /**
   * Under the `batches` lease (renewed): every event committed since `prev` was taken, recorded as
   * batch `prev.id + 1` with this statement's snapshot, in one statement; when the webhooks had
   * every earlier batch and this one holds at most `limit` events, its webhook deliveries are made
   * and the webhooks' cursor moved in the same statement (fannedOut), else fanOut pages through it.
   * `batch` undefined: nothing new. `events`: the batch's first `limit` events by position. held
   * false: the lease is not this replica's.
   */
  take(
    prev: Batch,
    lease: { token: string; leaseMs: number },
    source: string,
    limit: number,
  ): Promise<{ held: boolean; batch?: Batch; events: readonly BatchEvent[]; fannedOut: boolean }>;
  /**
   * Under the `batches` lease: the webhook deliveries of `batch`'s next `limit` events after
   * `afterPosition` and the webhooks' cursor moved past them, in one statement (only from the
   * cursor given: held false otherwise). `cursor`: where the webhooks' cursor is now.
   */
  fanOut(
    previous: Batch,
    batch: Batch,
    afterPosition: string | null,
    limit: number,
    source: string,
    lease: { token: string; leaseMs: number },
  ): Promise<{ held: boolean; events: number; cursor?: { batchId: string; position: string | null } }>;
  /** The batches a consumer has not finished: its cursor, and the first batch after `batchId` (undefined: none yet). */
  cursor(consumer: string): Promise<{ batchId: string; position: string | null }>;
  batchAfter(batchId: string): Promise<{ previous: Batch; batch: Batch } | undefined>;
  /** Events of `batch` (read with the snapshot of `previous`) after `position`, by position, at most `limit`. */
  read(previous: Batch, batch: Batch, afterPosition: string | null, limit: number, source: string): Promise<readonly BatchEvent[]>;
  /**
   * Moves the consumer's cursor from `from` to `to` under the `nats` lease (renewed). held false: the
   * lease is not this replica's; moved false (held): the cursor was not at `from` (an operator or a
   * bench moved it): nothing changed, the caller reads it again.
   */
  advance(
    consumer: string,
    lease: { token: string; leaseMs: number },
    from: { batchId: string; position: string | null },
    to: { batchId: string; position: string | null },
  ): Promise<{ held: boolean; moved: boolean }>;
  /** Events committed and in no batch yet, and the age of the oldest (seconds; 0 when none). */
  unbatched(): Promise<{ count: number; oldestAgeSeconds: number }>;
  /** Events in batches the consumer has not finished, and the age of the oldest such batch's oldest event. */
  unconsumed(consumer: string): Promise<{ count: number; oldestAgeSeconds: number }>;
  /** Deletes up to `limit` batches and completions older than `retentionMs` (never the latest batch, nor one an active consumer needs); how many. */
  prune(retentionMs: number, limit: number): Promise<number>;
}

/**
 * `webhooks`: the per-network bound on deliveries waiting (WEBHOOK_NETWORK_MAX_PENDING), held by
 * the deliveries take and fanOut make as by the deliveries store's enqueue, and counted alike.
 */
export function createEventBatchStore(pool: DatabasePool, metrics: Metrics, webhooks: DeliveryBound = {}): EventBatchStore {
  const timed = postgresCall(metrics);
  const maxPending = maxPendingOf(webhooks);
  return {
    acquire: (role, holder, token, leaseMs) =>
      timed('acquire_relay_lease', async () => {
        const row = await pool.one(sql.type(heldRow)`
          WITH taken AS (
            UPDATE event_relay_leases SET holder = ${holder}, token = ${token}::uuid, until = now() + ${seconds(leaseMs)}
            WHERE role = ${role} AND (until <= now() OR token = ${token}::uuid)
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM taken) AS held`);
        return row.held;
      }),

    release: (role, token) =>
      timed('release_relay_lease', async () => {
        // holder stays: that a replica with a broker ever held `nats` tells the outbox's drain (src/events/event-relay.ts).
        await pool.query(sql.unsafe`
          UPDATE event_relay_leases SET until = '-infinity' WHERE role = ${role} AND token = ${token}::uuid`);
      }),

    brokerSeen: () =>
      timed('relay_broker_seen', async () => {
        const row = await pool.one(sql.type(heldRow)`
          SELECT holder IS NOT NULL AS held FROM event_relay_leases WHERE role = 'nats'`);
        return row.held;
      }),

    latest: () =>
      timed('latest_event_batch', async () =>
        pool.one(sql.type(batchRow)`
          SELECT ${batchColumns} FROM event_batches b ORDER BY b.id DESC LIMIT 1`),
      ),

    take: (prev, lease, source, limit) =>
      timed('take_event_batch', async () => {
        // The batch is counted whole, but only its first `limit` events are composed: a batch after
        // a long pause (the relay or the database away) is fanned out page by page (fanOut).
        const row = await pool.one(sql.type(takenRow)`
          WITH ${renewed('batches', lease)}, win AS MATERIALIZED (
            -- Materialized: the batch's rows by the xid index, never the history walked in position order.
            SELECT e.* FROM agent_events e
            WHERE ${after(prev.snapshot)} AND EXISTS (SELECT 1 FROM lease)
          ), recorded AS (
            INSERT INTO event_batches (id, snapshot, events, first_position, last_position, oldest_time)
            SELECT ${prev.id}::bigint + 1, pg_current_snapshot(), count(*), min(w.position), max(w.position), min(w.event_time)
            FROM win w HAVING count(*) > 0
            RETURNING id, snapshot, events, first_position, last_position
          ), batch AS (
            -- The first rows by position, then their CloudEvents: composed for the page only, never
            -- for every row of a big batch before the LIMIT (a 20,000-event batch cost 180 ms a page).
            SELECT e.position AS pos, e.event_id, e.network_id, ${eventColumns(source)}
            FROM (SELECT w.* FROM win w ORDER BY w.position LIMIT ${limit}) e
            WHERE EXISTS (SELECT 1 FROM recorded)
          ), whole AS (
            -- The webhooks had every earlier batch, and this one is all here: fanned out now.
            SELECT coalesce((SELECT events FROM recorded) <= ${limit}, false)
                   AND EXISTS (SELECT 1 FROM event_consumers
                               WHERE name = 'webhooks' AND batch_id = ${prev.id}::bigint AND position IS NULL) AS ok
          ), webhooks_moved AS (
            UPDATE event_consumers SET batch_id = ${prev.id}::bigint + 1, position = NULL, updated_at = now()
            WHERE name = 'webhooks' AND (SELECT ok FROM whole)
          ), ${deliveriesOf(sql.fragment`SELECT b.event_id AS id, b.network_id, b.type, b.event AS body FROM batch b WHERE (SELECT ok FROM whole)`, maxPending)}
          SELECT EXISTS (SELECT 1 FROM lease) AS held, r.id::text AS id, r.snapshot::text AS snapshot, r.events,
                 r.first_position::text AS first_position, r.last_position::text AS last_position,
                 (SELECT ok FROM whole) AS fanned_out, ${droppedDeliveriesJson} AS dropped,
                 coalesce((SELECT json_agg(json_build_object('position', b."position", 'id', b.id, 'networkId', b."networkId",
                                    'agentId', b."agentId", 'type', b.type, 'event', b.event, 'ageSeconds', b."ageSeconds")
                                    ORDER BY b.pos)
                           FROM batch b), '[]'::json) AS rows
          FROM (SELECT 1) one LEFT JOIN recorded r ON true`);
        countDropped(row.dropped, metrics, webhooks);
        const batch =
          row.id !== null && row.snapshot !== null
            ? {
                id: row.id,
                snapshot: row.snapshot,
                events: row.events ?? 0,
                firstPosition: row.first_position,
                lastPosition: row.last_position,
              }
            : undefined;
        return { held: row.held, batch, events: batch ? row.rows : [], fannedOut: row.fanned_out };
      }),

    fanOut: (previous, batch, afterPosition, limit, source, lease) =>
      timed('fan_out_event_batch', async () => {
        const row = await pool.one(sql.type(fannedRow)`
          WITH ${renewed('batches', lease)}, page AS (
            -- Only the events of networks with an endpoint: a delivery is made for the endpoints
            -- there are when the page is fanned out, so the others' events are passed over without
            -- being composed (most networks have none). The page's rows first, then their CloudEvents.
            SELECT e.position AS pos, e.event_id, e.network_id, e.type, ${eventJson(source)} AS body
            FROM (
              SELECT e.* FROM agent_events e
              WHERE ${pageOf(previous, batch, afterPosition)} AND EXISTS (SELECT 1 FROM lease)
                AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.network_id = e.network_id AND w.enabled)
              ORDER BY e.position LIMIT ${limit}
            ) e
          ), moved AS (
            UPDATE event_consumers
            SET batch_id = CASE WHEN (SELECT count(*) FROM page) < ${limit} THEN ${batch.id}::bigint ELSE batch_id END,
                position = CASE WHEN (SELECT count(*) FROM page) < ${limit} THEN NULL ELSE (SELECT max(pos) FROM page) END,
                updated_at = now()
            WHERE name = 'webhooks' AND batch_id = ${previous.id}::bigint AND position IS NOT DISTINCT FROM ${afterPosition}::bigint
              AND EXISTS (SELECT 1 FROM lease)
            RETURNING batch_id::text, position::text
          ), ${deliveriesOf(sql.fragment`SELECT p.event_id AS id, p.network_id, p.type, p.body FROM page p WHERE EXISTS (SELECT 1 FROM moved)`, maxPending)}
          SELECT EXISTS (SELECT 1 FROM moved) AS held, (SELECT count(*) FROM page)::int AS n,
                 (SELECT batch_id FROM moved) AS batch_id, (SELECT position FROM moved) AS position, ${droppedDeliveriesJson} AS dropped`);
        countDropped(row.dropped, metrics, webhooks);
        return {
          held: row.held,
          events: row.n,
          cursor: row.batch_id === null ? undefined : { batchId: row.batch_id, position: row.position },
        };
      }),

    cursor: (consumer) =>
      timed('event_consumer_cursor', async () => {
        const row = await pool.one(sql.type(cursorRow)`
          SELECT batch_id::text, position::text FROM event_consumers WHERE name = ${consumer}`);
        return { batchId: row.batch_id, position: row.position };
      }),

    batchAfter: (batchId) =>
      timed('next_event_batch', async () => {
        // The cursor's batch and the next. Pruned batches leave a gap only behind a consumer that
        // stopped for a whole retention: it resumes at the oldest pair kept.
        const rows = await pool.any(sql.type(batchRow)`
          SELECT ${batchColumns} FROM event_batches b WHERE b.id >= ${batchId}::bigint ORDER BY b.id LIMIT 2`);
        const [previous, batch] = rows;
        return previous && batch ? { previous, batch } : undefined;
      }),

    read: (previous, batch, afterPosition, limit, source) =>
      timed('read_event_batch', async () =>
        pool.any(sql.type(eventRow)`
          SELECT ${eventColumns(source)}
          FROM (
            SELECT e.* FROM agent_events e WHERE ${pageOf(previous, batch, afterPosition)} ORDER BY e.position LIMIT ${limit}
          ) e
          ORDER BY e.position`),
      ),

    advance: (consumer, lease, from, to) =>
      timed('advance_event_consumer', async () => {
        const row = await pool.one(sql.type(advancedRow)`
          WITH ${renewed('nats', lease)}, moved AS (
            UPDATE event_consumers SET batch_id = ${to.batchId}::bigint, position = ${to.position}::bigint, updated_at = now()
            WHERE name = ${consumer} AND batch_id = ${from.batchId}::bigint
              AND position IS NOT DISTINCT FROM ${from.position}::bigint AND EXISTS (SELECT 1 FROM lease)
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM lease) AS held, EXISTS (SELECT 1 FROM moved) AS moved`);
        return row;
      }),

    unbatched: () =>
      timed('unbatched_events', async () => {
        const row = await pool.one(sql.type(backlogRow)`
          SELECT count(*)::int AS count, coalesce(extract(epoch FROM now() - min(e.event_time)), 0)::float8 AS oldest_age_seconds
          FROM agent_events e
          WHERE ${after(sql.fragment`(SELECT snapshot FROM event_batches ORDER BY id DESC LIMIT 1)`)}`);
        return { count: row.count, oldestAgeSeconds: row.oldest_age_seconds };
      }),

    unconsumed: (consumer) =>
      timed('unconsumed_events', async () => {
        const row = await pool.one(sql.type(backlogRow)`
          SELECT coalesce(sum(b.events), 0)::int AS count,
                 coalesce(extract(epoch FROM now() - min(b.oldest_time)), 0)::float8 AS oldest_age_seconds
          FROM event_batches b, event_consumers c
          WHERE c.name = ${consumer} AND b.id > c.batch_id`);
        return { count: row.count, oldestAgeSeconds: row.oldest_age_seconds };
      }),

    prune: (retentionMs, limit) =>
      timed('prune_event_batches', async () => {
        const row = await pool.one(sql.type(countRow)`
          WITH keep AS (
            -- The latest batch, and every batch from the one before an active consumer's next on
            -- (a consumer that has not moved for a whole retention is not waited for).
            SELECT least((SELECT max(id) FROM event_batches),
                         coalesce((SELECT min(batch_id) FROM event_consumers WHERE updated_at > now() - ${seconds(retentionMs)}),
                                  (SELECT max(id) FROM event_batches))) AS below
          ), batches AS (
            DELETE FROM event_batches
            WHERE id = ANY (ARRAY(SELECT id FROM event_batches
                                  WHERE id < (SELECT below FROM keep) AND created_at < now() - ${seconds(retentionMs)}
                                  ORDER BY id LIMIT ${limit}))
            RETURNING 1
          ), completions AS (
            DELETE FROM disable_completions
            WHERE position = ANY (ARRAY(SELECT position FROM disable_completions
                                        WHERE completed_at < now() - ${seconds(retentionMs)}
                                        ORDER BY completed_at LIMIT ${limit}))
            RETURNING 1
          )
          SELECT ((SELECT count(*) FROM batches) + (SELECT count(*) FROM completions))::int AS n`);
        return row.n;
      }),
  };
}
