import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { expect, vi } from 'vitest';
import { issueKey } from '../../src/auth/issued-key.js';
import { databaseUrl } from './database-url.js';
import { insertAgent, insertCampaigns, insertNetwork } from './platform-rows.js';
import { patience, waitFor } from './wait.js';

/** A row of pending_disables, as the tests read it. */
export interface PendingDisableRow {
  attempts: number;
  last_error: string | null;
  claim_token: string | null;
  lease_owner: string | null;
  /** Whether its next attempt is due now. */
  due: boolean;
}

/**
 * The events of the agents `$1` (an array) that the NATS consumer has not published yet: after its
 * cursor (docs/events-order.md), i.e. not in its finished batch's snapshot, and not among the
 * positions it published of the next one.
 */
export const unpublishedEventsSql = `
  SELECT count(*)::int AS n
  FROM agent_events e, event_consumers c
  JOIN event_batches b ON b.id = c.batch_id
  LEFT JOIN event_batches nb ON nb.id = c.batch_id + 1
  WHERE c.name = 'nats' AND e.agent_id = ANY ($1) AND NOT pg_visible_in_snapshot(e.xid, b.snapshot)
    AND NOT (c.position IS NOT NULL AND nb.id IS NOT NULL AND pg_visible_in_snapshot(e.xid, nb.snapshot) AND e.position <= c.position)`;

/** The events of the agents `$1` (an array) in no batch yet. */
const unbatchedEventsSql = `
  SELECT count(*)::int AS n
  FROM agent_events e, (SELECT snapshot FROM event_batches ORDER BY id DESC LIMIT 1) l
  WHERE e.agent_id = ANY ($1) AND NOT pg_visible_in_snapshot(e.xid, l.snapshot)`;

/** Direct access to the run's database for seeding and reading back, outside the service. */
export function testDatabase() {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: 4 });
  // An idle client still closing when the file's database is dropped (WITH FORCE, after the file)
  // gets the server's 57P01; without a listener that would fail the run after every test passed.
  // Errors of queries still reject the queries themselves.
  pool.on('error', () => undefined);

  return {
    pool,
    network: (options: { requireAgentApproval?: boolean } = {}) => insertNetwork(pool, options),
    agent: (networkId: string, options: { approved?: boolean } = {}) => insertAgent(pool, networkId, options),
    campaigns: (agentId: string, count: number, options: { active?: boolean; paused?: boolean } = {}) =>
      insertCampaigns(pool, agentId, count, options),
    async agentApproved(agentId: string): Promise<boolean> {
      const { rows } = await pool.query('SELECT agent_approved FROM agents WHERE agent_id = $1', [agentId]);
      return rows[0].agent_approved;
    },
    async pausedIds(agentId: string): Promise<Set<string>> {
      const { rows } = await pool.query('SELECT campaign_id FROM campaigns WHERE agent_id = $1 AND paused', [agentId]);
      return new Set(rows.map((row) => row.campaign_id));
    },
    /** The agent's rows in the audit trail. */
    async changeCount(agentId: string): Promise<number> {
      const { rows } = await pool.query('SELECT count(*)::int AS n FROM agent_status_changes WHERE agent_id = $1', [agentId]);
      return rows[0].n;
    },
    /** The agent's events not published to NATS yet (docs/events-order.md: after the NATS consumer's cursor). */
    async unrelayedEvents(agentId: string): Promise<number> {
      const { rows } = await pool.query(unpublishedEventsSql, [[agentId]]);
      return rows[0].n;
    },
    /** The agent's events in no batch yet (the webhooks and the feed have not got them). */
    async unbatchedEvents(agentId: string): Promise<number> {
      const { rows } = await pool.query(unbatchedEventsSql, [[agentId]]);
      return rows[0].n;
    },
    /** Whether the agent has a recorded disable still pending. */
    async pendingRow(agentId: string): Promise<boolean> {
      const { rows } = await pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId]);
      return rows.length === 1;
    },
    /** The agent's recorded disable still pending, as the worker sees it; undefined once it has finished. */
    async pendingDisable(agentId: string): Promise<PendingDisableRow | undefined> {
      const { rows } = await pool.query(
        `SELECT attempts, last_error, claim_token, lease_owner, next_attempt_at <= now() AS due
         FROM pending_disables WHERE agent_id = $1`,
        [agentId],
      );
      return rows[0];
    },
    /** The states the agent's rows in the audit trail asked for, oldest first. */
    async changeStates(agentId: string): Promise<boolean[]> {
      const { rows } = await pool.query('SELECT enabled FROM agent_status_changes WHERE agent_id = $1 ORDER BY change_id', [agentId]);
      return rows.map((row) => row.enabled as boolean);
    },
    /** Waits (bounded) until the agent's recorded disable has finished: its pending_disables row is gone. */
    async pendingDisableGone(agentId: string, timeout: number, interval = 200): Promise<void> {
      await vi.waitFor(
        async () => {
          const { rowCount } = await pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId]);
          expect(rowCount, `the pending disable of agent ${agentId}`).toBe(0);
        },
        { timeout, interval },
      );
    },
    /**
     * Waits (bounded) until no other session of the file's database is inside a statement or a
     * transaction: what a SIGKILLed process had sent has committed or rolled back by then (its
     * backend finishes the statement before it notices the closed socket). A state, where a fixed
     * pause would be too short on a busy machine.
     */
    async quiet(timeoutMs = patience(10_000)): Promise<void> {
      await waitFor(
        async () => {
          const { rows } = await pool.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
               AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')`,
          );
          return rows[0].n === 0;
        },
        { timeoutMs, intervalMs: 20, failure: 'another session of the database is still in a statement or a transaction' },
      );
    },
    /**
     * A platform transaction that wrote a campaign of the agent and stays open: the restriction
     * trigger holds the agent row FOR SHARE until `commit` (or `end`, which rolls back).
     */
    async holdAgentRow(agentId: string) {
      const client = new pg.Client({ connectionString: databaseUrl() });
      await client.connect();
      await client.query('BEGIN');
      await client.query('INSERT INTO campaigns (campaign_id, agent_id) VALUES ($1, $2)', [randomUUID(), agentId]);
      return {
        commit: () => client.query('COMMIT'),
        end: async () => {
          await client.query('ROLLBACK').catch(() => undefined);
          await client.end();
        },
      };
    },
    close: () => pool.end(),
  };
}

export type TestDatabase = ReturnType<typeof testDatabase>;

/** A fresh partner key in the issued format, made at run time (never committed). */
export function newApiKey(): string {
  return issueKey();
}
