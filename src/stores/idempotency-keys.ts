import { createHash } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { postgresCall, seconds } from './postgres.js';
import { type Statement, statementsFor } from './statements.js';

/** How long a key is remembered (docs/interfaces.md §11). */
const idempotencyKeyLifetimeHours = 24;
const lifetime = sql.fragment`make_interval(hours => ${idempotencyKeyLifetimeHours})`;

const claimRow = z.object({ change_id: z.string().nullable() });
const keyRow = z.object({
  agent_id: z.string(),
  enabled: z.boolean(),
  state: z.string(),
  status: z.number().nullable(),
  headers: z.string().nullable(),
  body: z.string().nullable(),
  retry_after: z.number(),
});
const countRow = z.object({ n: z.number() });

/**
 * What the table holds instead of a partner's Idempotency-Key (migration 014): a digest bound to the
 * network, so that no value a partner sent (a credential by mistake, say) is ever stored.
 */
export function idempotencyKeyDigest(networkId: string, key: string): string {
  return `sha256:${createHash('sha256').update(`${networkId.toLowerCase()}\n${key}`).digest('hex')}`;
}

/** How long a network over its quota is told to wait; its count is checked again at most this often. */
const quotaRecheckSeconds = 60;

/** The request a key was first used for: a repeat must ask for the same. */
export interface KeyedRequest {
  agentId: string;
  enabled: boolean;
}

/** A claim this request holds on its key, passed down to the statement that makes the change. */
export interface KeyClaim {
  networkId: string;
  /** The key's digest (idempotencyKeyDigest), never the partner's value. */
  key: string;
  claimToken: string;
}

/** A final answer, as kept and replayed. */
export interface StoredAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export type ClaimOutcome =
  /** This request holds the key. changeId: a request that held it before (and died) made its change already. */
  | { kind: 'claimed'; changeId: string | null }
  | { kind: 'replay'; answer: StoredAnswer }
  | { kind: 'in_use'; retryAfterSeconds: number }
  | { kind: 'reused' }
  /** The network holds IDEMPOTENCY_KEYS_PER_NETWORK keys already: nothing was stored. */
  | { kind: 'over_quota'; retryAfterSeconds: number };

/**
 * The idempotency keys of the status change (docs/interfaces.md §11), in PostgreSQL. Every method is
 * one autocommit statement: no claim is ever kept inside an open transaction, where a repeat would
 * queue behind it.
 */
export interface IdempotencyKeys {
  /**
   * Claims the key for this request, or says what a repeat gets: the first answer again, 409 while
   * the first request still holds a live claim, 422 when the key was used for another request. A
   * claim whose lease ran out (its request's replica died) is taken over by a repeat of the same
   * request; a key older than 24 hours is free again. `key` is the key's digest. A new key is
   * stored only while the network holds fewer than its quota of keys; before 'over_quota' the
   * network's keys are counted exactly (at most once a minute), so a drifted count never refuses.
   */
  claim(networkId: string, key: string, request: KeyedRequest, claimToken: string, leaseMs: number): Promise<ClaimOutcome>;
  /** Keeps a final answer for repeats; whether the claim was still this request's. */
  finish(claim: KeyClaim, answer: StoredAnswer): Promise<boolean>;
  /**
   * After an answer that is not final: forgets the key, so that a repeat runs again, unless this
   * request's change row was committed (docs/interfaces.md §11). Then the key is kept, its claim
   * expired at once: a repeat takes it over and answers as that change stands, never making it
   * again.
   */
  release(claim: KeyClaim): Promise<'forgotten' | 'kept'>;
  /** Deletes up to `batch` keys older than 24 hours, the oldest first; how many it deleted. */
  purgeExpired(batch: number): Promise<number>;
}

/** `perNetwork`: IDEMPOTENCY_KEYS_PER_NETWORK, the keys one network may hold (docs/interfaces.md §11). */
export function createIdempotencyKeys(
  pool: DatabasePool,
  metrics: Metrics,
  perNetwork: number,
  statement: Statement = statementsFor('none'),
): IdempotencyKeys {
  const timed = postgresCall(metrics);

  /**
   * The network's count of keys, counted again exactly when it says the quota is reached and was
   * not recounted within the last minute. The count itself is kept by the statements that insert
   * and delete keys; this corrects what drifted (keys expired but not purged yet, rows removed by
   * hand).
   */
  async function heldKeys(networkId: string): Promise<number> {
    const row = await pool.one(sql.type(countRow)`
      WITH recounted AS (
        UPDATE idempotency_key_counts c
        SET live = (SELECT count(*) FROM idempotency_keys k
                    WHERE k.network_id = ${networkId}::uuid AND k.created_at > now() - ${lifetime}),
            recounted_at = now()
        WHERE c.network_id = ${networkId}::uuid AND c.live >= ${perNetwork}
          AND c.recounted_at <= now() - make_interval(secs => ${quotaRecheckSeconds})
        RETURNING c.live
      )
      SELECT coalesce((SELECT live FROM recounted),
                      (SELECT live FROM idempotency_key_counts WHERE network_id = ${networkId}::uuid), 0)::int AS n`);
    return row.n;
  }

  async function lookup(networkId: string, key: string) {
    return pool.maybeOne(sql.type(keyRow)`
      SELECT agent_id, enabled, state, status, headers, body,
             greatest(1, ceil(extract(epoch FROM coalesce(lease_until, now()) - now())))::int AS retry_after
      FROM idempotency_keys
      WHERE network_id = ${networkId}::uuid AND idempotency_key = ${key} AND created_at > now() - ${lifetime}`);
  }

  return {
    claim: (networkId, key, request, claimToken, leaseMs) =>
      timed('claim_idempotency_key', async () => {
        // Two statements, never one: a claim that waited for a concurrent one to commit cannot see
        // that row in its own statement's snapshot, so the read that follows a lost claim is a
        // statement of its own. Three rounds at most: a key released in between is claimed again.
        for (let round = 0; round < 3; round += 1) {
          // A new key only under the network's quota (an existing one may always be taken over); the
          // count goes up with each key inserted, in the same statement.
          const claimed = await pool.maybeOne(statement('pas_claim_idempotency_key', claimRow)`
            WITH claimed AS (
            INSERT INTO idempotency_keys AS k
              (network_id, idempotency_key, agent_id, enabled, state, claim_token, lease_until)
            SELECT ${networkId}::uuid, ${key}, ${request.agentId}, ${request.enabled}, 'running', ${claimToken}::uuid,
                   now() + ${seconds(leaseMs)}
            WHERE coalesce((SELECT live FROM idempotency_key_counts WHERE network_id = ${networkId}::uuid), 0) < ${perNetwork}
               OR EXISTS (SELECT 1 FROM idempotency_keys WHERE network_id = ${networkId}::uuid AND idempotency_key = ${key})
            ON CONFLICT (network_id, idempotency_key) DO UPDATE
              SET agent_id = EXCLUDED.agent_id, enabled = EXCLUDED.enabled, state = 'running',
                  claim_token = EXCLUDED.claim_token, lease_until = EXCLUDED.lease_until,
                  status = NULL, headers = NULL, body = NULL,
                  change_id = CASE WHEN k.created_at <= now() - ${lifetime} THEN NULL ELSE k.change_id END,
                  created_at = CASE WHEN k.created_at <= now() - ${lifetime} THEN now() ELSE k.created_at END
              WHERE k.created_at <= now() - ${lifetime}
                 OR (k.state = 'running' AND k.lease_until <= now()
                     AND k.agent_id = EXCLUDED.agent_id AND k.enabled = EXCLUDED.enabled)
            RETURNING k.change_id::text AS change_id, k.xmax = 0 AS inserted
            ), counted AS (
              INSERT INTO idempotency_key_counts AS c (network_id, live)
              SELECT ${networkId}::uuid, 1 FROM claimed WHERE inserted
              ON CONFLICT (network_id) DO UPDATE SET live = c.live + 1
            )
            SELECT change_id FROM claimed`);
          if (claimed) return { kind: 'claimed', changeId: claimed.change_id };
          const row = await lookup(networkId, key);
          if (!row) {
            if ((await heldKeys(networkId)) >= perNetwork) return { kind: 'over_quota', retryAfterSeconds: quotaRecheckSeconds };
            continue;
          }
          if (row.agent_id !== request.agentId || row.enabled !== request.enabled) return { kind: 'reused' };
          // Retry-After: until the claim's lease runs out, but never more than a few seconds (a live
          // request usually answers well before its lease ends).
          if (row.state === 'running' || row.status === null) return { kind: 'in_use', retryAfterSeconds: Math.min(row.retry_after, 5) };
          return {
            kind: 'replay',
            answer: { status: row.status, headers: JSON.parse(row.headers ?? '{}') as Record<string, string>, body: row.body ?? '' },
          };
        }
        // Claimed and released by others three times in a row: say so as "in use".
        return { kind: 'in_use', retryAfterSeconds: 1 };
      }),

    finish: (claim, answer) =>
      timed('finish_idempotency_key', async () => {
        const row = await pool.maybeOne(sql.type(countRow)`
          UPDATE idempotency_keys
          SET state = 'done', status = ${answer.status}, headers = ${JSON.stringify(answer.headers)}, body = ${answer.body},
              claim_token = NULL, lease_until = NULL
          WHERE network_id = ${claim.networkId}::uuid AND idempotency_key = ${claim.key} AND claim_token = ${claim.claimToken}::uuid
          RETURNING 1 AS n`);
        return row !== null;
      }),

    release: (claim) =>
      timed('release_idempotency_key', async () => {
        // The change's own statement writes change_id, fenced by the same claim. While that
        // statement runs it holds the row, so the delete waits for it and then reads the row again
        // as committed: a change that committed is always seen, however late its answer (or none).
        const forgotten = await pool.one(sql.type(countRow)`
          WITH released AS (
            DELETE FROM idempotency_keys
            WHERE network_id = ${claim.networkId}::uuid AND idempotency_key = ${claim.key} AND claim_token = ${claim.claimToken}::uuid
              AND change_id IS NULL
            RETURNING 1
          ), uncounted AS (
            UPDATE idempotency_key_counts SET live = greatest(0, live - 1)
            WHERE network_id = ${claim.networkId}::uuid AND EXISTS (SELECT 1 FROM released)
          )
          SELECT count(*)::int AS n FROM released`);
        if (forgotten.n > 0) return 'forgotten';
        // A statement of its own, whose snapshot sees that change: the claim is expired at once.
        const kept = await pool.maybeOne(sql.type(countRow)`
          UPDATE idempotency_keys SET lease_until = now()
          WHERE network_id = ${claim.networkId}::uuid AND idempotency_key = ${claim.key} AND claim_token = ${claim.claimToken}::uuid
            AND change_id IS NOT NULL
          RETURNING 1 AS n`);
        return kept ? 'kept' : 'forgotten';
      }),

    purgeExpired: (batch) =>
      timed('purge_idempotency_keys', async () => {
        // PostgreSQL has no DELETE … LIMIT: the oldest rows are picked by the created_at index and
        // deleted by their tuple id, a few hundred at a time, each batch its own short statement. A
        // row taken over meanwhile has a new tuple id and a new created_at: it stays.
        const row = await pool.one(sql.type(countRow)`
          WITH purged AS (
            DELETE FROM idempotency_keys
            WHERE ctid = ANY (ARRAY(
                    SELECT ctid FROM idempotency_keys
                    WHERE created_at <= now() - ${lifetime}
                    ORDER BY created_at
                    LIMIT ${batch}))
              AND created_at <= now() - ${lifetime}
            RETURNING network_id
          ), uncounted AS (
            UPDATE idempotency_key_counts c SET live = greatest(0, c.live - p.n)
            FROM (SELECT network_id, count(*)::int AS n FROM purged GROUP BY network_id) p
            WHERE c.network_id = p.network_id
          )
          SELECT count(*)::int AS n FROM purged`);
        return row.n;
      }),
  };
}
