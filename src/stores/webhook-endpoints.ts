import { randomUUID } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { postgresCall } from './postgres.js';
import { isSealed, type SecretBox } from './secret-box.js';

const endpointRow = z.object({
  id: z.string(),
  url: z.string(),
  event_types: z.array(z.string()).nullable(),
  enabled: z.boolean(),
  disabled_reason: z.string().nullable(),
  created_at: z.string(),
});
const deliveryRow = z.object({
  id: z.string(),
  event_id: z.string(),
  event_type: z.string(),
  state: z.string(),
  attempts: z.number(),
  next_attempt_at: z.string().nullable(),
  created_at: z.string(),
  attempt_list: z.array(
    z.object({
      attempt: z.number(),
      attempted_at: z.string(),
      status_code: z.number().nullable(),
      outcome: z.string(),
      duration_ms: z.number(),
    }),
  ),
});
const existsRow = z.object({ found: z.boolean() });
const countRow = z.object({ n: z.number() });
const clearRow = z.object({ id: z.string(), secret: z.string(), previous_secret: z.string().nullable() });

/** An endpoint as its network sees it (never its secret). */
export interface WebhookEndpoint {
  id: string;
  url: string;
  /** null: every event type. */
  eventTypes: string[] | null;
  enabled: boolean;
  /** Why it was disabled: `gone` (it answered 410) or `failing` (5 days of failed attempts). */
  disabledReason: string | null;
  createdAt: string;
}

export interface DeliveryAttempt {
  attempt: number;
  attemptedAt: string;
  statusCode: number | null;
  outcome: string;
  durationMs: number;
}

export interface WebhookDelivery {
  id: string;
  eventId: string;
  eventType: string;
  state: 'pending' | 'succeeded' | 'failed';
  nextAttemptAt: string | null;
  createdAt: string;
  attempts: DeliveryAttempt[];
}

/**
 * The endpoints of docs/interfaces.md §14 as the partner API manages them. Every statement has the
 * key's network in its WHERE clause: another network's endpoint is not found, never loaded.
 */
export interface WebhookEndpointStore {
  /** The new endpoint, or undefined when the network already holds `limit` endpoints. */
  create(
    networkId: string,
    endpoint: { url: string; eventTypes: string[] | null; secret: string },
    limit: number,
  ): Promise<WebhookEndpoint | undefined>;
  list(networkId: string): Promise<WebhookEndpoint[]>;
  /** How many endpoints the network holds (the limit is checked before a URL is resolved). */
  count(networkId: string): Promise<number>;
  /** Enables the endpoint again with a fresh failing clock; undefined when it is not the network's. */
  enable(networkId: string, endpointId: string): Promise<WebhookEndpoint | undefined>;
  /** Seals every signing secret still stored in clear (rows written before encryption); how many. */
  sealStoredSecrets(box: SecretBox): Promise<number>;
  /** Whether it existed in the network. Its deliveries go with it. */
  remove(networkId: string, endpointId: string): Promise<boolean>;
  /** Makes `secret` the signing secret, the current one signing beside it for `overlapMs`; whether the endpoint exists. */
  rotateSecret(networkId: string, endpointId: string, secret: string, overlapMs: number): Promise<boolean>;
  /** The endpoint's latest deliveries, newest first; undefined when the endpoint is not the network's. */
  deliveries(networkId: string, endpointId: string, limit: number): Promise<WebhookDelivery[] | undefined>;
  /**
   * Makes the delivery due at once, on a fresh retry schedule. It neither enables a disabled
   * endpoint (enable() does) nor touches the endpoint's failing clock. A delivery under way is left
   * to its attempt. undefined when endpoint or delivery is not the network's.
   */
  retry(networkId: string, endpointId: string, deliveryId: string): Promise<WebhookDelivery | undefined>;
}

const endpointOf = (row: z.infer<typeof endpointRow>): WebhookEndpoint => ({
  id: row.id,
  url: row.url,
  eventTypes: row.event_types,
  enabled: row.enabled,
  disabledReason: row.disabled_reason,
  createdAt: new Date(row.created_at).toISOString(),
});

const deliveryOf = (row: z.infer<typeof deliveryRow>): WebhookDelivery => ({
  id: row.id,
  eventId: row.event_id,
  eventType: row.event_type,
  state: row.state as WebhookDelivery['state'],
  nextAttemptAt: row.state === 'pending' && row.next_attempt_at ? new Date(row.next_attempt_at).toISOString() : null,
  createdAt: new Date(row.created_at).toISOString(),
  attempts: row.attempt_list.map((a) => ({
    attempt: a.attempt,
    attemptedAt: new Date(a.attempted_at).toISOString(),
    statusCode: a.status_code,
    outcome: a.outcome,
    durationMs: a.duration_ms,
  })),
});

const endpointColumns = sql.fragment`id, url, event_types, enabled, disabled_reason, to_json(created_at)#>>'{}' AS created_at`;

/** A delivery's columns with its attempts, oldest first; `d` is webhook_deliveries. */
const deliveryColumns = sql.fragment`d.id, d.event_id, d.event_type, d.state, d.attempts,
  to_json(d.next_attempt_at)#>>'{}' AS next_attempt_at, to_json(d.created_at)#>>'{}' AS created_at,
  coalesce((SELECT json_agg(json_build_object('attempt', a.attempt, 'attempted_at', a.attempted_at, 'status_code', a.status_code,
      'outcome', a.outcome, 'duration_ms', a.duration_ms) ORDER BY a.attempt)
    FROM webhook_delivery_attempts a WHERE a.delivery_id = d.id), '[]'::json) AS attempt_list`;

export function createWebhookEndpointStore(pool: DatabasePool, metrics: Metrics, box?: SecretBox): WebhookEndpointStore {
  const timed = postgresCall(metrics);
  const seal = (secret: string, endpointId: string) => (box ? box.seal(secret, endpointId) : secret);
  return {
    create: (networkId, { url, eventTypes, secret }, limit) =>
      timed('create_webhook_endpoint', async () => {
        const id = randomUUID();
        const row = await pool.maybeOne(sql.type(endpointRow)`
          WITH slot AS (
            INSERT INTO webhook_endpoint_counts AS c (network_id, endpoints) VALUES (${networkId}, 1)
            ON CONFLICT (network_id) DO UPDATE SET endpoints = c.endpoints + 1 WHERE c.endpoints < ${limit}
            RETURNING 1
          )
          INSERT INTO webhook_endpoints (id, network_id, url, event_types, secret)
          SELECT ${id}, ${networkId}, ${url}, ${eventTypes ? sql.array(eventTypes, 'text') : null}, ${seal(secret, id)} FROM slot
          RETURNING ${endpointColumns}`);
        return row ? endpointOf(row) : undefined;
      }),
    list: (networkId) =>
      timed('list_webhook_endpoints', async () => {
        const rows = await pool.any(sql.type(endpointRow)`
          SELECT ${endpointColumns} FROM webhook_endpoints WHERE network_id = ${networkId} ORDER BY created_at, id`);
        return rows.map(endpointOf);
      }),
    remove: (networkId, endpointId) =>
      timed('delete_webhook_endpoint', async () => {
        const row = await pool.one(sql.type(existsRow)`
          WITH gone AS (
            DELETE FROM webhook_endpoints WHERE id = ${endpointId} AND network_id = ${networkId} RETURNING network_id
          ), counted AS (
            UPDATE webhook_endpoint_counts SET endpoints = endpoints - 1
            WHERE network_id = ${networkId} AND EXISTS (SELECT 1 FROM gone) RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM gone) AND EXISTS (SELECT 1 FROM counted) AS found`);
        return row.found;
      }),
    rotateSecret: (networkId, endpointId, secret, overlapMs) =>
      timed('rotate_webhook_secret', async () => {
        const row = await pool.one(sql.type(existsRow)`
          WITH rotated AS (
            UPDATE webhook_endpoints
               SET previous_secret = secret, previous_secret_expires_at = now() + make_interval(secs => ${overlapMs / 1000}), secret = ${seal(secret, endpointId)}
             WHERE id = ${endpointId} AND network_id = ${networkId}
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM rotated) AS found`);
        return row.found;
      }),
    count: (networkId) =>
      timed('count_webhook_endpoints', async () => {
        const row = await pool.maybeOne(sql.type(countRow)`
          SELECT endpoints AS n FROM webhook_endpoint_counts WHERE network_id = ${networkId}`);
        return row?.n ?? 0;
      }),
    enable: (networkId, endpointId) =>
      timed('enable_webhook_endpoint', async () => {
        const row = await pool.maybeOne(sql.type(endpointRow)`
          UPDATE webhook_endpoints SET enabled = true, disabled_reason = NULL, failing_since = NULL, success_streak = 0
           WHERE id = ${endpointId} AND network_id = ${networkId}
          RETURNING ${endpointColumns}`);
        return row ? endpointOf(row) : undefined;
      }),
    sealStoredSecrets: (sealer) =>
      timed('seal_webhook_secrets', async () => {
        const rows = await pool.any(sql.type(clearRow)`
          SELECT id, secret, previous_secret FROM webhook_endpoints
          WHERE secret NOT LIKE 'v1:%' OR previous_secret NOT LIKE 'v1:%'`);
        for (const row of rows) {
          const sealed = (value: string | null) => (value === null || isSealed(value) ? value : sealer.seal(value, row.id));
          // Only if unchanged meanwhile: a rotation under way wins.
          await pool.query(sql.unsafe`
            UPDATE webhook_endpoints SET secret = ${sealed(row.secret)!}, previous_secret = ${sealed(row.previous_secret)}
            WHERE id = ${row.id} AND secret = ${row.secret} AND previous_secret IS NOT DISTINCT FROM ${row.previous_secret}`);
        }
        return rows.length;
      }),
    deliveries: (networkId, endpointId, limit) =>
      timed('list_webhook_deliveries', async () => {
        const found = await pool.one(sql.type(existsRow)`
          SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = ${endpointId} AND network_id = ${networkId}) AS found`);
        if (!found.found) return undefined;
        const rows = await pool.any(sql.type(deliveryRow)`
          SELECT ${deliveryColumns} FROM webhook_deliveries d
          WHERE d.endpoint_id = ${endpointId} AND d.network_id = ${networkId}
          ORDER BY d.created_at DESC, d.id LIMIT ${limit}`);
        return rows.map(deliveryOf);
      }),
    retry: (networkId, endpointId, deliveryId) =>
      timed('retry_webhook_delivery', async () => {
        // A delivery under way (a live lease) keeps its attempt; any other is due at once.
        const row = await pool.one(sql.type(existsRow)`
          WITH delivery AS (
            UPDATE webhook_deliveries d
               SET state = 'pending', next_attempt_at = now(), schedule_start = d.attempts, claim_token = NULL, lease_owner = NULL, updated_at = now()
             FROM webhook_endpoints e
             WHERE d.id = ${deliveryId} AND d.endpoint_id = ${endpointId} AND d.network_id = ${networkId}
               AND e.id = d.endpoint_id AND e.network_id = ${networkId}
               AND NOT (d.state = 'pending' AND d.claim_token IS NOT NULL AND d.next_attempt_at > now())
            RETURNING d.id
          )
          SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE id = ${deliveryId} AND endpoint_id = ${endpointId} AND network_id = ${networkId}) AS found`);
        if (!row.found) return undefined;
        const delivery = await pool.one(
          sql.type(deliveryRow)`SELECT ${deliveryColumns} FROM webhook_deliveries d WHERE d.id = ${deliveryId}`,
        );
        return deliveryOf(delivery);
      }),
  };
}
