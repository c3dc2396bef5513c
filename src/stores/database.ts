import { createPgDriverFactory } from '@slonik/pg-driver';
import { createPool, type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { DependencyError, type DependencyFailure, timedCall } from './dependency-error.js';

export interface PoolOptions {
  url: string;
  maxPoolSize: number;
  statementTimeoutMs: number;
}

/**
 * A slonik pool tuned for a hot path of single autocommit statements:
 * - no `DISCARD ALL` on release (slonik's default reset): this service sets no session state, and
 *   the reset costs a round trip per checkout, about half the throughput on `SELECT 1`;
 * - connections stay open for 60 s idle rather than 5 s, so bursts do not pay for reconnecting;
 * - no transaction is used at all (every write is one statement), and slonik's query and
 *   transaction retries are off: nothing here may run twice behind the caller's back.
 */
export async function createDatabasePool(options: PoolOptions): Promise<DatabasePool> {
  return createPool(options.url, {
    driverFactory: createPgDriverFactory(),
    maxPoolSize: options.maxPoolSize,
    statementTimeout: options.statementTimeoutMs,
    idleInTransactionSessionTimeout: options.statementTimeoutMs,
    idleTimeout: 60_000,
    connectionTimeout: 2_000,
    queryRetryLimit: 0,
    transactionRetryLimit: 0,
    resetConnection: async () => {},
  });
}

const oneRow = z.object({ one: z.number() });
const markRow = z.object({ n: z.number(), finished: z.boolean() });
const disableRow = z.object({ change_id: z.string(), claimed: z.boolean(), campaign_ids: z.array(z.string()) });
const statusRow = z.object({
  agent_id: z.string(),
  network_id: z.string(),
  agent_approved: z.boolean(),
  active_unpaused: z.number(),
  in_progress: z.boolean(),
});
const batchRow = z.object({ held: z.boolean(), ids: z.array(z.string()) });
const countRow = z.object({ n: z.number() });
const flagRow = z.object({ flag: z.boolean() });
const takeOverRow = z.object({ claimed: z.boolean(), pending: z.boolean() });
const claimRow = z.object({
  agent_id: z.string(),
  network_id: z.string(),
  claim_token: z.string(),
  attempts: z.number(),
  trace_parent: z.string().nullable(),
});
const statsRow = z.object({ n: z.number(), oldest_age_seconds: z.number() });

/** Who asked for a status change, for the audit trail (never the key). */
export interface ChangeAuthor {
  partnerName: string;
  requestId: string | undefined;
}

export interface Lease {
  claimToken: string;
  owner: string;
  leaseMs: number;
}

export interface DisableOutcome {
  /** The agent_status_changes row this request appended. */
  changeId: string;
  /** Whether this request's run holds the pending row's claim (false: another run holds it). */
  claimed: boolean;
  /** The first batch of active, unpaused campaigns, read by the same statement. */
  firstBatch: string[];
}

export interface AgentStatusView {
  agentId: string;
  networkId: string;
  enabled: boolean;
  activeUnpausedCampaignCount: number;
  disableInProgress: boolean;
}

/** A pending disable claimed by the worker. */
export interface ClaimedDisable {
  agentId: string;
  networkId: string;
  claimToken: string;
  attempts: number;
  traceParent: string | null;
}

/**
 * Every statement the service runs. Each method is one autocommit statement; the hot ones are named
 * prepared statements (parsed and planned once per connection: the pool never resets its
 * connections, so they survive); the network id from
 * the partner's key is part of every agent lookup, so an agent of another network is never read
 * or written. Writes to a pending_disables row that a run has claimed are fenced by its claim
 * token: a run whose claim was superseded (an enable deleted the row) or taken over (its lease ran
 * out) can no longer change it.
 */
export interface AgentRepository {
  /** agent_approved = true, the pending disable deleted, a change row appended; false: not in the network. */
  enable(networkId: string, agentId: string, author: ChangeAuthor): Promise<boolean>;
  /**
   * agent_approved = false, the pending row upserted (claimed for this request unless another live
   * run holds it), a change row appended, and the first batch read; undefined: not in the network.
   */
  disable(
    networkId: string,
    agentId: string,
    author: ChangeAuthor,
    lease: Lease & { traceParent: string | null },
    batchSize: number,
  ): Promise<DisableOutcome | undefined>;
  readStatus(networkId: string, agentId: string): Promise<AgentStatusView | undefined>;
  /** Checks the claim (held and not expired) and reads the next batch after `after`; held false: the claim is gone. */
  nextBatch(agentId: string, lease: Lease, after: string | null, batchSize: number): Promise<{ held: boolean; ids: string[] }>;
  renew(agentId: string, lease: Lease): Promise<boolean>;
  /**
   * Marks campaigns paused (only those still active and unpaused); how many this call moved. With
   * `finishWith` (the run's claim token, on what was read as the run's last batch) the same
   * statement also deletes the pending row when no other active, unpaused campaign is left, as
   * `finish` would: one round trip less for every run that fits in one batch.
   */
  markPaused(agentId: string, campaignIds: readonly string[], finishWith?: string): Promise<{ moved: number; finished: boolean }>;
  /** Deletes the pending row if no active, unpaused campaign is left; whether it did. */
  finish(agentId: string, claimToken: string): Promise<boolean>;
  /** Gives up the claim: due again after a capped exponential backoff, or at once. */
  release(
    agentId: string,
    claimToken: string,
    when: { backoff: { baseMs: number; maxMs: number } } | 'now',
    lastError: string | null,
  ): Promise<void>;
  /** Claims the pending row when no live run holds it. */
  takeOver(agentId: string, lease: Lease): Promise<{ claimed: boolean; pending: boolean }>;
  /** Whether an enable of the agent was recorded after the given change. */
  enabledSince(agentId: string, changeId: string): Promise<boolean>;
  remainingCampaigns(agentId: string): Promise<number>;
  claimDue(owner: string, leaseMs: number, limit: number): Promise<ClaimedDisable[]>;
  /** Releases, at once, every claim this replica still holds (clean shutdown). */
  releaseOwned(owner: string): Promise<number>;
  pendingStats(): Promise<{ count: number; oldestAgeSeconds: number }>;
  ping(): Promise<void>;
}

const seconds = (ms: number) => sql.fragment`make_interval(secs => ${ms / 1000})`;

/** What a PostgreSQL error says about the database, for logs and the 500's wording. */
function classify(error: unknown): DependencyFailure {
  const name = (error as Error).name ?? '';
  const code = (error as { code?: string }).code ?? '';
  if (name === 'StatementTimeoutError' || code === '57014') return 'timeout';
  if (name.endsWith('ConstraintViolationError') || code.startsWith('23') || code === 'P0001') return 'constraint';
  if (
    name === 'ConnectionError' ||
    /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|57P0\d|08\d\d\d)$/.test(code) ||
    /terminat|connect/i.test((error as Error).message ?? '')
  ) {
    return 'unavailable';
  }
  return 'error';
}

export function createAgentRepository(pool: DatabasePool, metrics: Metrics): AgentRepository {
  const timed = <T>(operation: string, run: () => Promise<T>) =>
    timedCall(
      metrics,
      'postgres',
      operation,
      run,
      (error) => new DependencyError('postgres', classify(error), `${operation}: ${(error as Error).name}`),
    );

  const unpausedOf = (agentId: string) => sql.fragment`c.agent_id = ${agentId} AND c.active AND NOT c.paused`;

  return {
    enable: (networkId, agentId, author) =>
      timed('enable_agent', async () => {
        const row = await pool.maybeOne(sql.prepared('pas_enable_agent', oneRow)`
          WITH agent AS (
            UPDATE agents SET agent_approved = true
            WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
            RETURNING agent_id, network_id
          ), cleared AS (
            DELETE FROM pending_disables p USING agent WHERE p.agent_id = agent.agent_id
          ), change AS (
            INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
            SELECT agent_id, network_id, true, ${author.partnerName}, ${author.requestId ?? null} FROM agent
          )
          SELECT 1 AS one FROM agent`);
        return row !== null;
      }),

    disable: (networkId, agentId, author, lease, batchSize) =>
      timed('disable_agent', async () => {
        const row = await pool.maybeOne(sql.prepared('pas_disable_agent', disableRow)`
          WITH agent AS (
            UPDATE agents SET agent_approved = false
            WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
            RETURNING agent_id, network_id
          ), pending AS (
            INSERT INTO pending_disables AS p
              (agent_id, requested_at, attempts, next_attempt_at, claim_token, lease_owner, trace_parent)
            SELECT agent_id, now(), 1, now() + ${seconds(lease.leaseMs)}, ${lease.claimToken}::uuid, ${lease.owner}, ${lease.traceParent}
            FROM agent
            ON CONFLICT (agent_id) DO UPDATE
              SET attempts = p.attempts + 1, next_attempt_at = EXCLUDED.next_attempt_at,
                  claim_token = EXCLUDED.claim_token, lease_owner = EXCLUDED.lease_owner,
                  trace_parent = EXCLUDED.trace_parent
              WHERE p.claim_token IS NULL OR p.next_attempt_at <= now()
            RETURNING 1
          ), change AS (
            INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
            SELECT agent_id, network_id, false, ${author.partnerName}, ${author.requestId ?? null} FROM agent
            RETURNING change_id
          )
          SELECT (SELECT change_id FROM change)::text AS change_id,
                 EXISTS (SELECT 1 FROM pending) AS claimed,
                 ARRAY(SELECT id::text FROM public.unpaused_campaigns_after(agent.agent_id, NULL, ${batchSize}) AS id) AS campaign_ids
          FROM agent`);
        return row ? { changeId: row.change_id, claimed: row.claimed, firstBatch: row.campaign_ids } : undefined;
      }),

    readStatus: (networkId, agentId) =>
      timed('read_agent_status', async () => {
        const row = await pool.maybeOne(sql.prepared('pas_read_agent_status', statusRow)`
          SELECT a.agent_id, a.network_id::text AS network_id, a.agent_approved,
                 (SELECT count(*) FROM campaigns c WHERE ${unpausedOf(agentId)})::int AS active_unpaused,
                 EXISTS (SELECT 1 FROM pending_disables p WHERE p.agent_id = a.agent_id) AS in_progress
          FROM agents a
          WHERE a.agent_id = ${agentId} AND a.network_id = ${networkId}::uuid`);
        return row
          ? {
              agentId: row.agent_id,
              networkId: row.network_id,
              enabled: row.agent_approved,
              activeUnpausedCampaignCount: row.active_unpaused,
              disableInProgress: row.in_progress,
            }
          : undefined;
      }),

    nextBatch: (agentId, lease, after, batchSize) =>
      timed('next_campaign_batch', async () => {
        // A read only: the lease is renewed by the run's timer, so a batch costs no write here.
        const row = await pool.one(sql.prepared('pas_next_campaign_batch', batchRow)`
          WITH claim AS (
            SELECT 1 FROM pending_disables
            WHERE agent_id = ${agentId} AND claim_token = ${lease.claimToken}::uuid AND next_attempt_at > now()
          )
          SELECT EXISTS (SELECT 1 FROM claim) AS held,
                 ARRAY(SELECT id::text FROM public.unpaused_campaigns_after(${agentId}, ${after}::uuid, ${batchSize}) AS id
                        WHERE EXISTS (SELECT 1 FROM claim)) AS ids`);
        return { held: row.held, ids: row.ids };
      }),

    renew: (agentId, lease) =>
      timed('renew_lease', async () => {
        const row = await pool.maybeOne(sql.type(oneRow)`
          UPDATE pending_disables SET next_attempt_at = now() + ${seconds(lease.leaseMs)}
          WHERE agent_id = ${agentId} AND claim_token = ${lease.claimToken}::uuid
          RETURNING 1 AS one`);
        return row !== null;
      }),

    markPaused: (agentId, campaignIds, finishWith) =>
      timed('mark_campaigns_paused', async () => {
        const row = await pool.one(sql.prepared('pas_mark_campaigns_paused', markRow)`
          WITH moved AS (
            UPDATE campaigns c SET paused = true
            WHERE c.campaign_id = ANY(${sql.array(campaignIds, 'uuid')})
              -- A filter, never an index condition: the batch is found by primary key. With the
              -- agent as index condition the planner (whenever the agent's campaigns are newer than
              -- the statistics) walks every unpaused campaign of the agent for each batch.
              AND (c.agent_id = ${agentId}) IS TRUE
              AND c.active AND NOT c.paused
            RETURNING c.campaign_id
          ), finished AS (
            -- The statement's snapshot still shows the campaigns it moves as unpaused: any other
            -- unpaused campaign is among the first (moved + 1) in campaign order.
            DELETE FROM pending_disables p
            WHERE p.agent_id = ${agentId} AND p.claim_token = ${finishWith ?? null}::uuid
              AND NOT EXISTS (
                SELECT 1 FROM public.unpaused_campaigns_after(${agentId}, NULL, (SELECT count(*) FROM moved)::int + 1) AS id
                WHERE id NOT IN (SELECT campaign_id FROM moved))
            RETURNING 1
          )
          SELECT (SELECT count(*) FROM moved)::int AS n, EXISTS (SELECT 1 FROM finished) AS finished`);
        return { moved: row.n, finished: row.finished };
      }),

    finish: (agentId, claimToken) =>
      timed('finish_disable', async () => {
        const row = await pool.maybeOne(sql.prepared('pas_finish_disable', oneRow)`
          DELETE FROM pending_disables p
          WHERE p.agent_id = ${agentId} AND p.claim_token = ${claimToken}::uuid
            -- Through the function, not NOT EXISTS (… campaigns c WHERE agent …): from its sixth
            -- run on a connection PostgreSQL may plan a prepared statement once for any agent, and
            -- that generic plan, expecting thousands of unpaused campaigns per agent, scans the
            -- whole table for the first one: 40 ms for an agent that has none left.
            AND NOT EXISTS (SELECT 1 FROM public.unpaused_campaigns_after(${agentId}, NULL, 1))
          RETURNING 1 AS one`);
        return row !== null;
      }),

    release: (agentId, claimToken, when, lastError) =>
      timed('release_disable', async () => {
        // Backoff from the database clock: base × 2^(attempts−1), capped, with equal jitter.
        const due =
          when === 'now'
            ? sql.fragment`now()`
            : sql.fragment`now() + make_interval(secs => least(${when.backoff.maxMs}::float8,
                  ${when.backoff.baseMs}::float8 * power(2, least(attempts - 1, 20))) * (0.5 + random() / 2) / 1000)`;
        await pool.query(sql.unsafe`
          UPDATE pending_disables
          SET claim_token = NULL, lease_owner = NULL, next_attempt_at = ${due},
              last_error = coalesce(${lastError}, last_error)
          WHERE agent_id = ${agentId} AND claim_token = ${claimToken}::uuid`);
      }),

    takeOver: (agentId, lease) =>
      timed('take_over_disable', async () => {
        const row = await pool.one(sql.type(takeOverRow)`
          WITH taken AS (
            UPDATE pending_disables
            SET attempts = attempts + 1, claim_token = ${lease.claimToken}::uuid, lease_owner = ${lease.owner},
                next_attempt_at = now() + ${seconds(lease.leaseMs)}
            WHERE agent_id = ${agentId} AND (claim_token IS NULL OR next_attempt_at <= now())
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM taken) AS claimed,
                 EXISTS (SELECT 1 FROM pending_disables WHERE agent_id = ${agentId}) AS pending`);
        return row;
      }),

    enabledSince: (agentId, changeId) =>
      timed('read_status_changes', async () => {
        const row = await pool.one(sql.type(flagRow)`
          SELECT EXISTS (
            SELECT 1 FROM agent_status_changes
            WHERE agent_id = ${agentId} AND enabled AND change_id > ${changeId}::bigint
          ) AS flag`);
        return row.flag;
      }),

    remainingCampaigns: (agentId) =>
      timed('count_unpaused_campaigns', async () => {
        const row = await pool.one(sql.type(countRow)`SELECT count(*)::int AS n FROM campaigns c WHERE ${unpausedOf(agentId)}`);
        return row.n;
      }),

    claimDue: (owner, leaseMs, limit) =>
      timed('claim_pending_disables', async () => {
        // ARRAY(...) makes the locking sub-select run once (an InitPlan), so a claim never takes
        // more than `limit` rows; SKIP LOCKED lets replicas claim side by side.
        const rows = await pool.any(sql.type(claimRow)`
          UPDATE pending_disables p
          SET attempts = p.attempts + 1, claim_token = gen_random_uuid(), lease_owner = ${owner},
              next_attempt_at = now() + ${seconds(leaseMs)}
          FROM agents a
          WHERE p.agent_id = ANY (ARRAY(
                  SELECT d.agent_id FROM pending_disables d
                  WHERE d.next_attempt_at <= now()
                  ORDER BY d.next_attempt_at
                  LIMIT ${limit}
                  FOR UPDATE SKIP LOCKED))
            AND a.agent_id = p.agent_id
          RETURNING p.agent_id, a.network_id::text AS network_id, p.claim_token::text AS claim_token,
                    p.attempts, p.trace_parent`);
        return rows.map((row) => ({
          agentId: row.agent_id,
          networkId: row.network_id,
          claimToken: row.claim_token,
          attempts: row.attempts,
          traceParent: row.trace_parent,
        }));
      }),

    releaseOwned: (owner) =>
      timed('release_owned_disables', async () => {
        const row = await pool.one(sql.type(countRow)`
          WITH released AS (
            UPDATE pending_disables SET claim_token = NULL, lease_owner = NULL, next_attempt_at = now()
            WHERE lease_owner = ${owner} AND claim_token IS NOT NULL
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM released`);
        return row.n;
      }),

    pendingStats: () =>
      timed('pending_disable_stats', async () => {
        const row = await pool.one(sql.type(statsRow)`
          SELECT count(*)::int AS n,
                 coalesce(extract(epoch FROM now() - min(requested_at)), 0)::float8 AS oldest_age_seconds
          FROM pending_disables`);
        return { count: row.n, oldestAgeSeconds: row.oldest_age_seconds };
      }),

    ping: () =>
      timed('ping', async () => {
        await pool.oneFirst(sql.type(oneRow)`SELECT 1 AS one`);
      }),
  };
}
