import { type DatabasePool, type FragmentSqlToken, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { postgresCall, seconds } from './postgres.js';
import type { SecretBox } from './secret-box.js';

const countRow = z.object({ n: z.number() });
/** A statement's `webhook_deliveries_dropped` (droppedDeliveriesJson): each network's deliveries not made. */
export const droppedDeliveries = z.array(z.object({ network_id: z.string(), n: z.number() }));
const enqueuedRow = z.object({ n: z.number(), dropped: droppedDeliveries });
const claimRow = z.object({
  id: z.string(),
  network_id: z.string(),
  endpoint_id: z.string(),
  event_id: z.string(),
  body: z.string(),
  url: z.string(),
  secrets: z.array(z.string()),
  claim_token: z.string(),
  attempts: z.number(),
  schedule_start: z.number(),
});
const claimResult = z.object({ claims: z.array(claimRow), held_back: z.number() });
const recordRow = z.object({ recorded: z.boolean(), state: z.string().nullable(), disabled: z.string().nullable() });
const statsRow = z.object({ pending: z.number(), oldest_due_age_seconds: z.number() });

/** An event to deliver, as the outbox holds it. `type` without the project's prefix (`agent.disabled`). */
export interface DeliverableEvent {
  id: string;
  networkId: string;
  type: string;
  /** The exact JSON sent and signed, on every attempt. */
  body: string;
}

/** A delivery the sender holds a lease on. */
export interface ClaimedDelivery {
  id: string;
  networkId: string;
  endpointId: string;
  /** The event id: webhook-id, the same on every attempt. */
  eventId: string;
  body: string;
  url: string;
  /** Every secret that signs now: the current one, and the previous one during a rotation. */
  secrets: string[];
  claimToken: string;
  /** Attempts made before this one. */
  attempts: number;
  /** Attempts made before the current retry schedule started. */
  scheduleStart: number;
}

/** What an attempt came to, and what follows from it. */
export interface AttemptRecord {
  attemptedAt: Date;
  statusCode: number | null;
  /** success, http_error, gone, timeout, refused, network_error. */
  outcome: string;
  durationMs: number;
  /** The next attempt's delay; undefined when there is none (succeeded, gone, or the schedule is over). */
  retryInMs: number | undefined;
  /** 410: the endpoint is disabled at once. */
  gone: boolean;
  /** An endpoint failing for this long with no success is disabled. */
  disableAfterFailingMs: number;
}

/**
 * The webhook deliveries of docs/interfaces.md §14, taken by the sender of every replica with the
 * worker's lease discipline: a claim writes a claim token and moves next_attempt_at to the lease's
 * end, the attempt's record is fenced by that token, and a replica that dies leaves its lease to run
 * out, when the delivery is due again for any replica.
 */
export interface WebhookDeliveryStore {
  /** One delivery per event and enabled endpoint of its network that takes its type; how many were made. */
  enqueue(events: readonly DeliverableEvent[]): Promise<number>;
  /**
   * Due deliveries, at most `limit`, spread over networks (each network's oldest first, one round
   * of networks after another), at most `perEndpoint` and `perNetwork` under a lease at once;
   * `heldBack`: due deliveries left because their network had `perNetwork` under way.
   */
  claimDue(
    owner: string,
    leaseMs: number,
    limit: number,
    bounds: { perEndpoint: number; perNetwork: number },
  ): Promise<{ claims: ClaimedDelivery[]; heldBack: number }>;
  /**
   * Records an attempt and its consequences in one statement: the delivery succeeded, failed for
   * good, or is due again; the endpoint's failing clock, which a failure starts and only two
   * successes in a row stop (a lone success among failures does not: it would keep an endpoint
   * that almost never answers enabled for ever); a 410, or a failure 5 days after the clock
   * started, disables the endpoint. recorded false: the lease was lost (another replica took the delivery over).
   */
  recordAttempt(
    claim: ClaimedDelivery,
    attempt: AttemptRecord,
  ): Promise<{ recorded: boolean; state: string | null; disabled: 'gone' | 'failing' | null }>;
  /** Gives back at once every lease this replica holds (clean shutdown). */
  releaseOwned(owner: string): Promise<number>;
  /** Deletes up to `limit` deliveries (with their attempts) that ended more than `retentionMs` ago; how many. */
  prune(retentionMs: number, limit: number): Promise<number>;
  /** Forgets every previous signing secret whose overlap after a rotation has ended; how many. */
  dropExpiredSecrets(): Promise<number>;
  /** Deliveries waiting for an attempt (enabled endpoints), and how long the oldest due one has waited. */
  stats(): Promise<{ pending: number; oldestDueAgeSeconds: number }>;
}

/** WEBHOOK_NETWORK_MAX_PENDING's default: deliveries of one network waiting at most. */
const defaultNetworkMaxPending = 10_000;

/**
 * The CTEs of a statement that hands events to the webhooks: one delivery per event of `events` (a
 * query with columns id, network_id, type, body) and enabled endpoint of its network that takes its
 * type, an event already delivered to an endpoint not again; and no more than a network's room
 * below `maxPendingPerNetwork` deliveries waiting (counted up to the bound on an index, never
 * beyond): what is over it is not made, and `webhook_deliveries_dropped` (network_id, n) says how
 * many of each network's were not. So a flood of changes towards endpoints that never answer
 * costs rows up to the bound, and other networks nothing. The bound holds per statement: two
 * fan-outs at once may each fill the same room (the overshoot is one batch at most).
 * `webhook_deliveries_made` is the insert's RETURNING.
 */
export const deliveriesOf = (events: FragmentSqlToken, maxPendingPerNetwork = defaultNetworkMaxPending) => sql.fragment`
  webhook_delivery_candidates AS (
    SELECT e.id AS endpoint_id, ev.network_id, ev.id AS event_id, ev.type, ev.body,
           row_number() OVER (PARTITION BY ev.network_id ORDER BY ev.id, e.id) AS n
    FROM (${events}) AS ev
    JOIN webhook_endpoints e ON e.network_id = ev.network_id AND e.enabled
      AND (e.event_types IS NULL OR ev.type = ANY (e.event_types))
  ), webhook_network_room AS (
    SELECT c.network_id, greatest(0, ${maxPendingPerNetwork} - (
             SELECT count(*) FROM (
               SELECT 1 FROM webhook_deliveries d WHERE d.network_id = c.network_id AND d.state = 'pending'
               LIMIT ${maxPendingPerNetwork}) AS waiting)) AS room
    FROM (SELECT DISTINCT network_id FROM webhook_delivery_candidates) AS c
  ), webhook_deliveries_made AS (
    INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body)
    SELECT c.endpoint_id, c.network_id, c.event_id, c.type, c.body
    FROM webhook_delivery_candidates c JOIN webhook_network_room r ON r.network_id = c.network_id
    WHERE c.n <= r.room
    ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING 1
  ), webhook_deliveries_dropped AS (
    SELECT c.network_id, count(*)::int AS n
    FROM webhook_delivery_candidates c JOIN webhook_network_room r ON r.network_id = c.network_id
    WHERE c.n > r.room
    GROUP BY c.network_id
  )`;

/** A column for the final SELECT of a statement with deliveriesOf: its `webhook_deliveries_dropped` as JSON (droppedDeliveries). */
export const droppedDeliveriesJson = sql.fragment`
  coalesce((SELECT json_agg(json_build_object('network_id', network_id, 'n', n)) FROM webhook_deliveries_dropped), '[]'::json)`;

/** The per-network bound on deliveries waiting, for every statement that makes deliveries (deliveriesOf). */
export interface DeliveryBound {
  /** WEBHOOK_NETWORK_MAX_PENDING. */
  networkMaxPending?: number;
  /** A network's deliveries were not made: it has as many waiting as it may. */
  onDropped?: (networkId: string, count: number) => void;
}

/** The bound's cap: WEBHOOK_NETWORK_MAX_PENDING, or its default. */
export const maxPendingOf = (bound: DeliveryBound): number => bound.networkMaxPending ?? defaultNetworkMaxPending;

/** Counts what a statement did not make into webhook_deliveries_dropped_total, and tells the bound's onDropped (the log line). */
export function countDropped(dropped: z.infer<typeof droppedDeliveries>, metrics: Metrics, bound: DeliveryBound): void {
  for (const { network_id, n } of dropped) {
    metrics.webhooks.deliveriesDropped.inc(n);
    bound.onDropped?.(network_id, n);
  }
}

export interface WebhookDeliveryStoreOptions extends DeliveryBound {
  /** Opens the stored (sealed) signing secrets; absent: they are used as stored. */
  secrets?: SecretBox;
}

export function createWebhookDeliveryStore(
  pool: DatabasePool,
  metrics: Metrics,
  options: WebhookDeliveryStoreOptions = {},
): WebhookDeliveryStore {
  const timed = postgresCall(metrics);
  const maxPending = maxPendingOf(options);
  return {
    enqueue: (events) =>
      timed('enqueue_webhook_deliveries', async () => {
        if (events.length === 0) return 0;
        const ids = sql.array(
          events.map((e) => e.id),
          'uuid',
        );
        const networks = sql.array(
          events.map((e) => e.networkId),
          'uuid',
        );
        const types = sql.array(
          events.map((e) => e.type),
          'text',
        );
        const bodies = sql.array(
          events.map((e) => e.body),
          'text',
        );
        const row = await pool.one(sql.type(enqueuedRow)`
          WITH ${deliveriesOf(sql.fragment`SELECT * FROM unnest(${ids}, ${networks}, ${types}, ${bodies}) AS ev(id, network_id, type, body)`, maxPending)}
          SELECT (SELECT count(*)::int FROM webhook_deliveries_made) AS n, ${droppedDeliveriesJson} AS dropped`);
        countDropped(row.dropped, metrics, options);
        return row.n;
      }),
    claimDue: (owner, leaseMs, limit, { perEndpoint, perNetwork }) =>
      timed('claim_webhook_deliveries', async () => {
        if (limit <= 0) return { claims: [], heldBack: 0 };
        const result = await pool.one(sql.type(claimResult)`
          WITH leased AS (
            SELECT endpoint_id, network_id, count(*)::int AS n FROM webhook_deliveries
            WHERE state = 'pending' AND claim_token IS NOT NULL AND next_attempt_at > now()
            GROUP BY endpoint_id, network_id
          ), network_leased AS (
            SELECT network_id, sum(n)::int AS n FROM leased GROUP BY network_id
          ), candidates AS (
            SELECT d.id, d.network_id, d.next_attempt_at
            FROM webhook_endpoints e
            CROSS JOIN LATERAL (
              SELECT d.id, d.network_id, d.next_attempt_at FROM webhook_deliveries d
              WHERE d.endpoint_id = e.id AND d.state = 'pending' AND d.next_attempt_at <= now()
              ORDER BY d.next_attempt_at
              LIMIT greatest(0, ${perEndpoint} - coalesce((SELECT l.n FROM leased l WHERE l.endpoint_id = e.id), 0))
              FOR UPDATE OF d SKIP LOCKED
            ) d
            WHERE e.enabled
          ), ranked AS (
            SELECT c.id, c.next_attempt_at,
                   row_number() OVER (PARTITION BY c.network_id ORDER BY c.next_attempt_at) + coalesce(nl.n, 0) AS network_rank
            FROM candidates c LEFT JOIN network_leased nl ON nl.network_id = c.network_id
          ), chosen AS (
            SELECT id FROM ranked WHERE network_rank <= ${perNetwork}
            ORDER BY network_rank, next_attempt_at LIMIT ${limit}
          ), claimed AS (
          UPDATE webhook_deliveries d
             SET claim_token = gen_random_uuid(), lease_owner = ${owner}, next_attempt_at = now() + ${seconds(leaseMs)}, updated_at = now()
            FROM chosen, webhook_endpoints e
           WHERE d.id = chosen.id AND e.id = d.endpoint_id
          RETURNING d.id, d.network_id, d.endpoint_id, d.event_id, d.body, e.url, d.claim_token, d.attempts, d.schedule_start,
                    array_remove(ARRAY[e.secret, CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END], NULL) AS secrets
          )
          SELECT coalesce((SELECT json_agg(claimed) FROM claimed), '[]'::json) AS claims,
                 (SELECT count(*)::int FROM ranked WHERE network_rank > ${perNetwork}) AS held_back`);
        const open = (stored: string, endpointId: string) => (options.secrets ? options.secrets.open(stored, endpointId) : stored);
        const claims = result.claims.map((row) => ({
          id: row.id,
          networkId: row.network_id,
          endpointId: row.endpoint_id,
          eventId: row.event_id,
          body: row.body,
          url: row.url,
          secrets: row.secrets.map((stored) => open(stored, row.endpoint_id)),
          claimToken: row.claim_token,
          attempts: row.attempts,
          scheduleStart: row.schedule_start,
        }));
        return { claims, heldBack: result.held_back };
      }),
    recordAttempt: (claim, attempt) =>
      timed('record_webhook_attempt', async () => {
        const success = attempt.outcome === 'success';
        const state = success ? 'succeeded' : attempt.gone || attempt.retryInMs === undefined ? 'failed' : 'pending';
        const next = attempt.retryInMs === undefined ? sql.fragment`now()` : sql.fragment`now() + ${seconds(attempt.retryInMs)}`;
        // The endpoint's row is locked first, then the delivery's: the order of an endpoint's DELETE,
        // whose cascade locks its deliveries. The other order deadlocked with a DELETE (40P01) beside
        // a second test suite.
        const row = await pool.one(sql.type(recordRow)`
          WITH before AS (
            SELECT e.id, e.enabled, e.failing_since, e.success_streak FROM webhook_endpoints e
            WHERE e.id = ${claim.endpointId} FOR UPDATE
          ), delivery AS (
            UPDATE webhook_deliveries
               SET attempts = attempts + 1, state = ${state}, next_attempt_at = ${next},
                   claim_token = NULL, lease_owner = NULL, updated_at = now()
             WHERE id = ${claim.id} AND claim_token = ${claim.claimToken} AND EXISTS (SELECT 1 FROM before)
            RETURNING id, endpoint_id, attempts
          ), attempt AS (
            INSERT INTO webhook_delivery_attempts (delivery_id, attempt, attempted_at, status_code, outcome, duration_ms)
            SELECT id, attempts, ${attempt.attemptedAt.toISOString()}, ${attempt.statusCode}, ${attempt.outcome}, ${attempt.durationMs}
            FROM delivery
          ), endpoint AS (
            UPDATE webhook_endpoints e
               SET failing_since = CASE
                     WHEN NOT ${success} THEN coalesce(e.failing_since, now())
                     WHEN e.success_streak >= 1 THEN NULL
                     ELSE e.failing_since END,
                   success_streak = CASE WHEN ${success} THEN e.success_streak + 1 ELSE 0 END,
                   enabled = e.enabled AND disabling.reason IS NULL,
                   disabled_reason = coalesce(disabling.reason, e.disabled_reason)
              FROM before,
                   LATERAL (SELECT CASE
                     WHEN NOT before.enabled THEN NULL
                     WHEN ${attempt.gone} THEN 'gone'
                     WHEN NOT ${success} AND before.failing_since < now() - ${seconds(attempt.disableAfterFailingMs)} THEN 'failing'
                   END AS reason) disabling
             WHERE e.id = before.id AND EXISTS (SELECT 1 FROM delivery)
            RETURNING disabling.reason
          )
          SELECT EXISTS (SELECT 1 FROM delivery) AS recorded, ${state}::text AS state, (SELECT reason FROM endpoint) AS disabled`);
        return { recorded: row.recorded, state: row.recorded ? row.state : null, disabled: row.disabled as 'gone' | 'failing' | null };
      }),
    releaseOwned: (owner) =>
      timed('release_webhook_deliveries', async () => {
        const row = await pool.one(sql.type(countRow)`
          WITH released AS (
            UPDATE webhook_deliveries SET claim_token = NULL, lease_owner = NULL, next_attempt_at = now(), updated_at = now()
            WHERE lease_owner = ${owner} AND state = 'pending' AND claim_token IS NOT NULL
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM released`);
        return row.n;
      }),
    prune: (retentionMs, limit) =>
      timed('prune_webhook_deliveries', async () => {
        const row = await pool.one(sql.type(countRow)`
          WITH pruned AS (
            DELETE FROM webhook_deliveries
            WHERE id = ANY (ARRAY(
              SELECT id FROM webhook_deliveries
              WHERE state <> 'pending' AND updated_at < now() - ${seconds(retentionMs)}
              ORDER BY updated_at LIMIT ${limit}
              FOR UPDATE SKIP LOCKED))
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM pruned`);
        return row.n;
      }),
    dropExpiredSecrets: () =>
      timed('drop_expired_webhook_secrets', async () => {
        const row = await pool.one(sql.type(countRow)`
          WITH dropped AS (
            UPDATE webhook_endpoints SET previous_secret = NULL, previous_secret_expires_at = NULL
            WHERE previous_secret_expires_at <= now()
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM dropped`);
        return row.n;
      }),
    stats: () =>
      timed('webhook_delivery_stats', async () => {
        const row = await pool.one(sql.type(statsRow)`
          SELECT count(*)::int AS pending,
                 coalesce(extract(epoch FROM now() - min(d.next_attempt_at) FILTER (WHERE d.next_attempt_at <= now())), 0)::float8 AS oldest_due_age_seconds
          FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
          WHERE d.state = 'pending'`);
        return { pending: row.pending, oldestDueAgeSeconds: row.oldest_due_age_seconds };
      }),
  };
}
