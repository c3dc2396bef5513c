import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { postgresCall } from './postgres.js';

/** How long a batch and its results are kept (docs/interfaces.md §16). */
const batchLifetimeHours = 24;

/** One change of a batch, as sent. */
export interface BatchChange {
  agentId: string;
  enabled: boolean;
}

/** One change's answer, as kept: the single call's status and body. */
export interface ItemAnswer {
  status: number;
  body: object;
}

export interface BatchRow {
  batchId: string;
  requestId: string;
  apiVersion: string;
  changes: BatchChange[];
  /** The answers kept so far, by index. */
  results: Record<string, ItemAnswer>;
  bodyDigest: string;
  /** Seconds since the batch was created (the database's clock). */
  ageSeconds: number;
}

/** How a change without a kept answer stands in the stores (for a read of its batch). */
export interface ChangeStanding {
  agentId: string;
  /** The agent is of the network. */
  inNetwork: boolean;
  /** The batch's change row of this agent exists (the change was made). */
  made: boolean;
  enabled: boolean;
  disableInProgress: boolean;
  activeUnpausedCampaignCount: number;
  /** An enable of the agent was recorded after the batch's change. */
  enabledSince: boolean;
}

const batchRow = z.object({
  batch_id: z.string(),
  request_id: z.string(),
  api_version: z.string(),
  changes: z.array(z.object({ agentId: z.string(), enabled: z.boolean() })),
  results: z.record(z.string(), z.object({ status: z.number(), body: z.object({}).passthrough() })),
  body_digest: z.string(),
  age_seconds: z.number(),
});
const insertedRow = z.object({ inserted: z.boolean() });
const countRow = z.object({ n: z.number() });
const standingRow = z.object({
  agent_id: z.string(),
  in_network: z.boolean(),
  made: z.boolean(),
  enabled: z.boolean(),
  in_progress: z.boolean(),
  active_unpaused: z.number(),
  enabled_since: z.boolean(),
});

/**
 * The bulk changes (status_batches, migration 027): one row per batch, kept 24 hours, holding its
 * changes and the answers known so far; the resource of respond-async and what a repeat of the
 * batch's Idempotency-Key answers from. The key is stored as its digest only.
 */
export interface StatusBatches {
  /** Creates the batch; with a key already used by the network, the existing batch instead (nothing created). */
  create(batch: {
    batchId: string;
    networkId: string;
    requestId: string;
    apiVersion: string;
    changes: readonly BatchChange[];
    keyDigest: string | null;
    bodyDigest: string;
  }): Promise<{ created: true } | { created: false; existing: BatchRow }>;
  /** Adds answers (by index) to the batch's kept results. */
  keep(batchId: string, answers: Readonly<Record<string, ItemAnswer>>): Promise<void>;
  /** The network's batch, while it is kept. */
  read(networkId: string, batchId: string): Promise<BatchRow | undefined>;
  /** How the given changes of a batch stand (those without a kept answer). */
  standings(networkId: string, requestId: string, agentIds: readonly string[]): Promise<ChangeStanding[]>;
  /** Deletes up to `limit` batches past their 24 hours; how many. */
  purgeExpired(limit: number): Promise<number>;
}

function toBatch(row: z.infer<typeof batchRow>): BatchRow {
  return {
    batchId: row.batch_id,
    requestId: row.request_id,
    apiVersion: row.api_version,
    changes: row.changes,
    results: row.results as Record<string, ItemAnswer>,
    bodyDigest: row.body_digest,
    ageSeconds: row.age_seconds,
  };
}

const batchColumns = sql.fragment`batch_id::text AS batch_id, request_id, api_version, changes, results, body_digest,
  extract(epoch FROM now() - created_at)::float8 AS age_seconds`;

export function createStatusBatches(pool: DatabasePool, metrics: Metrics): StatusBatches {
  const timed = postgresCall(metrics);
  const readByKey = (networkId: string, keyDigest: string) =>
    pool.maybeOne(sql.type(batchRow)`
      SELECT ${batchColumns} FROM status_batches
      WHERE network_id = ${networkId}::uuid AND key_digest = ${keyDigest} AND expires_at > now()`);
  return {
    create: (batch) =>
      timed('create_status_batch', async () => {
        for (let attempt = 0; ; attempt += 1) {
          // A key whose batch expired is free again: its row goes first, in the same statement.
          const row = await pool.one(sql.type(insertedRow)`
            WITH expired AS (
              DELETE FROM status_batches
              WHERE ${batch.keyDigest}::text IS NOT NULL AND network_id = ${batch.networkId}::uuid
                AND key_digest = ${batch.keyDigest} AND expires_at <= now()
            ), inserted AS (
              INSERT INTO status_batches (batch_id, network_id, request_id, api_version, changes, key_digest, body_digest, expires_at)
              VALUES (${batch.batchId}::uuid, ${batch.networkId}::uuid, ${batch.requestId}, ${batch.apiVersion},
                      ${sql.jsonb(batch.changes as unknown as Parameters<typeof sql.jsonb>[0])}, ${batch.keyDigest}, ${batch.bodyDigest},
                      now() + make_interval(hours => ${batchLifetimeHours}))
              ON CONFLICT DO NOTHING
              RETURNING 1
            )
            SELECT EXISTS (SELECT 1 FROM inserted) AS inserted`);
          if (row.inserted) return { created: true as const };
          const existing = batch.keyDigest ? await readByKey(batch.networkId, batch.keyDigest) : null;
          if (existing) return { created: false as const, existing: toBatch(existing) };
          if (attempt > 0) throw new Error('status batch neither created nor found');
        }
      }),

    keep: (batchId, answers) =>
      timed('keep_batch_results', async () => {
        if (Object.keys(answers).length === 0) return;
        await pool.query(sql.unsafe`
          UPDATE status_batches SET results = results || ${sql.jsonb(answers as Parameters<typeof sql.jsonb>[0])}
          WHERE batch_id = ${batchId}::uuid`);
      }),

    read: (networkId, batchId) =>
      timed('read_status_batch', async () => {
        const row = await pool.maybeOne(sql.type(batchRow)`
          SELECT ${batchColumns} FROM status_batches
          WHERE batch_id = ${batchId}::uuid AND network_id = ${networkId}::uuid AND expires_at > now()`);
        return row ? toBatch(row) : undefined;
      }),

    standings: (networkId, requestId, agentIds) =>
      timed('read_batch_standings', async () => {
        if (agentIds.length === 0) return [];
        const rows = await pool.any(sql.type(standingRow)`
          WITH wanted AS (SELECT unnest(${sql.array(agentIds, 'text')}) AS agent_id),
          made AS (
            SELECT DISTINCT ON (c.agent_id) c.agent_id, c.change_id, c.enabled
            FROM agent_status_changes c JOIN wanted w ON w.agent_id = c.agent_id
            WHERE c.request_id = ${requestId} AND c.network_id = ${networkId}::uuid
            ORDER BY c.agent_id, c.change_id DESC
          )
          SELECT w.agent_id, a.agent_id IS NOT NULL AS in_network, m.agent_id IS NOT NULL AS made,
                 coalesce(a.agent_approved, false) AS enabled,
                 EXISTS (SELECT 1 FROM pending_disables p WHERE p.agent_id = w.agent_id) AS in_progress,
                 (SELECT count(*) FROM campaigns c WHERE c.agent_id = w.agent_id AND c.active AND NOT c.paused)::int AS active_unpaused,
                 EXISTS (SELECT 1 FROM agent_status_changes e
                         WHERE e.agent_id = w.agent_id AND e.enabled AND e.change_id > m.change_id) AS enabled_since
          FROM wanted w
          LEFT JOIN agents a ON a.agent_id = w.agent_id AND a.network_id = ${networkId}::uuid
          LEFT JOIN made m ON m.agent_id = w.agent_id`);
        return rows.map((row) => ({
          agentId: row.agent_id,
          inNetwork: row.in_network,
          made: row.made,
          enabled: row.enabled,
          disableInProgress: row.in_progress,
          activeUnpausedCampaignCount: row.active_unpaused,
          enabledSince: row.enabled_since,
        }));
      }),

    purgeExpired: (limit) =>
      timed('purge_status_batches', async () => {
        const row = await pool.one(sql.type(countRow)`
          WITH purged AS (
            DELETE FROM status_batches WHERE ctid = ANY(ARRAY(
              SELECT ctid FROM status_batches WHERE expires_at <= now() ORDER BY expires_at LIMIT ${limit}))
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM purged`);
        return row.n;
      }),
  };
}
