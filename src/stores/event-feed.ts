import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { eventJson } from './event-batches.js';
import { postgresCall, seconds } from './postgres.js';

/**
 * The partner events feed's reads (docs/interfaces.md §17) of the recorded snapshot batches
 * (docs/events-order.md): events in the order (batch id, position), after a position that names
 * (batch id, position). A reader reads only recorded batches, so what it has read never gains an
 * earlier event later. Batch `b` is read with the snapshots of `b - 1` and `b`, so a batch whose
 * predecessor was pruned is never read (its events are past the retention).
 */

/** A place in the order: every event of batches before `batch`, and of `batch` up to `position` (null: all of it). */
export interface FeedPosition {
  batch: string;
  position: string | null;
}

/** An event of the feed. */
export interface FeedEvent {
  batch: string;
  position: string;
  agentId: string;
  networkId: string;
  /** The type without the project's prefix (`agent.disabled`). */
  type: string;
  /** The CloudEvent, JSON text: the same bytes as the webhooks' and NATS's. */
  event: string;
  /** Seconds from the event's `time` to its read, by the database's clock. */
  ageSeconds: number;
}

/** What a page read is restricted to. */
export interface FeedFilter {
  networkIds: readonly string[];
  agentId?: string;
  /** Types without the prefix; none: every type. */
  types?: readonly string[];
}

/** Where a read starts: a valid position, or why not. */
export type FeedStart = { kind: 'ok'; from: FeedPosition; latest: string } | { kind: 'gone' } | { kind: 'unknown' };

export interface FeedScan {
  events: FeedEvent[];
  /** The last batch the scan looked at whole (every event of it up to `latest` that passed the filter is in `events`, unless `limit` was reached). */
  scannedTo: string | undefined;
}

export interface EventFeedStore {
  /**
   * Checks a position before a read (undefined: the oldest kept, EVENTS_FEED_RETENTION_DAYS back):
   * gone when the events after it are no longer kept (its batch pruned, or older than the retention
   * while newer ones exist), unknown when it names a batch not recorded yet.
   */
  start(after: FeedPosition | undefined, retentionMs: number): Promise<FeedStart>;
  /**
   * The events after `after` of batches up to `upTo` that pass `filter`, by (batch, position), at most
   * `limit`, reading batches holding at most about `budget` events in all (at least one batch).
   */
  scan(after: FeedPosition, upTo: string, filter: FeedFilter, limit: number, budget: number, source: string): Promise<FeedScan>;
  /** The latest recorded batch's id. */
  latest(): Promise<string>;
}

const startRow = z.object({
  latest: z.string(),
  start: z.string(),
  needKept: z.boolean(),
  batchOld: z.boolean(),
});
const latestRow = z.object({ latest: z.string() });
const scanRow = z.object({
  scannedTo: z.string().nullable(),
  rows: z.array(
    z.object({
      batch: z.string(),
      position: z.string(),
      agentId: z.string(),
      networkId: z.string(),
      type: z.string(),
      event: z.string(),
      ageSeconds: z.number(),
    }),
  ),
});

/** Batches one scan statement reads at most. */
const maxBatchesPerScan = 500;

export function createEventFeedStore(pool: DatabasePool, metrics: Metrics): EventFeedStore {
  const timed = postgresCall(metrics);
  return {
    start: (after, retentionMs) =>
      timed('feed_start', async () => {
        const batch = after?.batch ?? '0';
        // The batch whose snapshot the next read needs: the cursor's own when it ends its batch,
        // else the one before it. Without a cursor: the batch before the first one within the
        // retention (ids and creation times grow together: both found by the primary key), the
        // latest when none is that recent.
        const need = after && after.position !== null ? (BigInt(after.batch) - 1n).toString() : batch;
        const row = await pool.one(sql.type(startRow)`
          SELECT (SELECT max(id) FROM event_batches)::text AS latest,
                 (SELECT CASE WHEN f.first IS NULL THEN (SELECT max(id) FROM event_batches)
                              ELSE coalesce((SELECT max(b.id) FROM event_batches b WHERE b.id < f.first), f.first) END
                    FROM (SELECT (SELECT id FROM event_batches WHERE created_at >= now() - ${seconds(retentionMs)}
                                  ORDER BY id LIMIT 1) AS first) f)::text AS start,
                 EXISTS (SELECT 1 FROM event_batches WHERE id = ${need}::bigint) AS "needKept",
                 coalesce((SELECT created_at < now() - ${seconds(retentionMs)} FROM event_batches WHERE id = ${batch}::bigint), false) AS "batchOld"`);
        if (!after) return { kind: 'ok', from: { batch: row.start, position: null }, latest: row.latest };
        if (BigInt(after.batch) > BigInt(row.latest)) return { kind: 'unknown' };
        // The latest batch is always kept: a cursor there stays good however old it is.
        if (!row.needKept || (row.batchOld && after.batch !== row.latest)) return { kind: 'gone' };
        return { kind: 'ok', from: after, latest: row.latest };
      }),

    scan: (after, upTo, filter, limit, budget, source) =>
      timed('feed_scan', async () => {
        const from = after.position === null ? (BigInt(after.batch) + 1n).toString() : after.batch;
        const agent = filter.agentId === undefined ? sql.fragment`true` : sql.fragment`e.agent_id = ${filter.agentId}`;
        const types =
          filter.types === undefined ? sql.fragment`true` : sql.fragment`e.type = ANY (${sql.array([...filter.types], 'text')})`;
        const past =
          after.position === null
            ? sql.fragment`true`
            : sql.fragment`(bs.id > ${after.batch}::bigint OR e.position > ${after.position}::bigint)`;
        // Each batch's events through the xid index, bounded on both sides: committed after the
        // previous batch's snapshot (at or above its xmax, or in progress in it) and visible in the
        // batch's own (below its xmax).
        const row = await pool.one(sql.type(scanRow)`
          WITH bs AS MATERIALIZED (
            SELECT c.id, c.snapshot, c.prev FROM (
              SELECT b.id, b.snapshot, p.snapshot AS prev, sum(b.events) OVER (ORDER BY b.id) - b.events AS before
              FROM event_batches b JOIN event_batches p ON p.id = b.id - 1
              WHERE b.id >= ${from}::bigint AND b.id <= ${upTo}::bigint
              ORDER BY b.id LIMIT ${maxBatchesPerScan}) c
            WHERE c.before < ${budget}
          ), found AS (
            -- The page's rows first; their CloudEvents are composed below, for these rows only.
            SELECT bs.id AS batch_id, e.*
            FROM bs CROSS JOIN LATERAL (
              SELECT * FROM agent_events e
              WHERE ((e.xid >= pg_snapshot_xmax(bs.prev) AND e.xid < pg_snapshot_xmax(bs.snapshot))
                     OR e.xid = ANY (ARRAY(SELECT pg_snapshot_xip(bs.prev))))
                AND pg_visible_in_snapshot(e.xid, bs.snapshot)
                AND e.network_id = ANY (${sql.array([...filter.networkIds], 'uuid')})
              -- Not flattened into a join: run once per batch with that batch's bounds, so each
              -- reads its own rows by the xid index. Flattened, the planner (which guessed one
              -- batch) filtered the whole history once per batch: 46 batches of a 22,609-row
              -- history took 2.2 s, and a page of a longer one the 5 s statement time-out.
              OFFSET 0
            ) e
            WHERE ${agent} AND ${types} AND ${past}
            ORDER BY bs.id, e.position
            LIMIT ${limit}
          )
          SELECT (SELECT max(id) FROM bs)::text AS "scannedTo",
                 coalesce((SELECT json_agg(json_build_object('batch', e.batch_id::text, 'position', e.position::text, 'agentId', e.agent_id,
                                  'networkId', e.network_id::text, 'type', e.type, 'event', ${eventJson(source)},
                                  'ageSeconds', extract(epoch FROM clock_timestamp() - e.event_time)::float8)
                                  ORDER BY e.batch_id, e.position) FROM found e), '[]'::json) AS rows`);
        return { events: row.rows, scannedTo: row.scannedTo ?? undefined };
      }),

    latest: () =>
      timed('feed_latest_batch', async () => {
        const row = await pool.one(sql.type(latestRow)`SELECT max(id)::text AS latest FROM event_batches`);
        return row.latest;
      }),
  };
}
