import { createPgDriverFactory } from '@slonik/pg-driver';
import { createPool, sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { DependencyError } from './dependency-error.js';

export interface PoolOptions {
  url: string;
  maxPoolSize: number;
  statementTimeoutMs: number;
}

/**
 * The one slonik pool. Tuned for a hot path of single autocommit statements:
 * - no `DISCARD ALL` on release (slonik's default reset): this service sets no session state, and
 *   the reset costs a round trip per checkout, about half the throughput on `SELECT 1`;
 * - connections stay open for 60 s idle rather than 5 s, so bursts do not pay for reconnecting;
 * - no transaction is used at all (every write is one statement), so slonik's transaction retry
 *   can never replay a remote call.
 */
export async function createDatabasePool(options: PoolOptions): Promise<DatabasePool> {
  return createPool(options.url, {
    driverFactory: createPgDriverFactory(),
    maxPoolSize: options.maxPoolSize,
    statementTimeout: options.statementTimeoutMs,
    idleInTransactionSessionTimeout: options.statementTimeoutMs,
    idleTimeout: 60_000,
    connectionTimeout: 2_000,
    resetConnection: async () => {},
  });
}

const oneRow = z.object({ one: z.number() });
const disableRow = z.object({ agent_id: z.string(), campaign_ids: z.array(z.string()) });
const pauseRow = z.object({ paused_count: z.number(), next_ids: z.array(z.string()) });

/**
 * The agent and campaign rows. Every method is one statement; the network id from the partner's key
 * is part of every agent lookup, so an agent of another network is never read or written.
 */
export interface AgentRepository {
  /** Sets agent_approved = true; false when the agent is not in the network. */
  approve(networkId: string, agentId: string): Promise<boolean>;
  /**
   * Commits agent_approved = false and returns the first batch of active, unpaused campaigns;
   * undefined when the agent is not in the network.
   */
  disapprove(networkId: string, agentId: string, batchSize: number): Promise<{ firstBatch: string[] } | undefined>;
  /**
   * Marks a batch paused (only rows still active and unpaused: concurrent disables never count one
   * twice) and returns how many this call moved, with the next batch after `after`.
   */
  markPausedAndFetchNext(agentId: string, batch: readonly string[], after: string, batchSize: number): Promise<{ paused: number; next: string[] }>;
  ping(): Promise<void>;
}

export function createAgentRepository(pool: DatabasePool, metrics: Metrics): AgentRepository {
  async function timed<T>(operation: string, run: () => Promise<T>): Promise<T> {
    const started = performance.now();
    let outcome: 'ok' | 'error' = 'error';
    try {
      const result = await run();
      outcome = 'ok';
      return result;
    } catch (error) {
      throw new DependencyError('postgres', 'unavailable', `${operation}: ${(error as Error).name}`);
    } finally {
      metrics.dependencyDuration.observe({ dependency: 'postgres', operation, outcome }, (performance.now() - started) / 1000);
    }
  }

  return {
    approve: (networkId, agentId) =>
      timed('approve_agent', async () => {
        const row = await pool.maybeOne(sql.type(oneRow)`
          UPDATE agents SET agent_approved = true
          WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
          RETURNING 1 AS one`);
        return row !== null;
      }),

    disapprove: (networkId, agentId, batchSize) =>
      timed('disapprove_agent', async () => {
        const row = await pool.maybeOne(sql.type(disableRow)`
          WITH agent AS (
            UPDATE agents SET agent_approved = false
            WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
            RETURNING agent_id
          )
          SELECT agent.agent_id,
                 ARRAY(SELECT c.campaign_id::text FROM campaigns c
                        WHERE c.agent_id = agent.agent_id AND c.active AND NOT c.paused
                        ORDER BY c.campaign_id LIMIT ${batchSize}) AS campaign_ids
          FROM agent`);
        return row ? { firstBatch: row.campaign_ids } : undefined;
      }),

    markPausedAndFetchNext: (agentId, batch, after, batchSize) =>
      timed('mark_campaigns_paused', async () => {
        const row = await pool.one(sql.type(pauseRow)`
          WITH moved AS (
            UPDATE campaigns SET paused = true
            WHERE campaign_id = ANY(${sql.array(batch, 'uuid')}) AND agent_id = ${agentId}
              AND active AND NOT paused
            RETURNING campaign_id
          )
          SELECT (SELECT count(*) FROM moved)::int AS paused_count,
                 ARRAY(SELECT c.campaign_id::text FROM campaigns c
                        WHERE c.agent_id = ${agentId} AND c.active AND NOT c.paused
                          AND c.campaign_id > ${after}::uuid
                        ORDER BY c.campaign_id LIMIT ${batchSize}) AS next_ids`);
        return { paused: row.paused_count, next: row.next_ids };
      }),

    ping: () =>
      timed('ping', async () => {
        await pool.oneFirst(sql.type(oneRow)`SELECT 1 AS one`);
      }),
  };
}
