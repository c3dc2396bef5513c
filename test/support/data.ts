import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';

/** Direct access to the run's database for seeding and reading back, outside the service. */
export function testDatabase() {
  const pool = new pg.Pool({ connectionString: inject('databaseUrl'), max: 4 });

  return {
    pool,
    async network(options: { requireAgentApproval?: boolean } = {}): Promise<string> {
      const networkId = randomUUID();
      await pool.query('INSERT INTO networks (network_id, require_agent_approval) VALUES ($1, $2)', [
        networkId,
        options.requireAgentApproval ?? false,
      ]);
      return networkId;
    },
    async agent(networkId: string, options: { approved?: boolean } = {}): Promise<string> {
      const agentId = `us-east-1:${randomUUID()}`;
      await pool.query('INSERT INTO agents (agent_id, network_id, agent_approved) VALUES ($1, $2, $3)', [
        agentId,
        networkId,
        options.approved ?? true,
      ]);
      return agentId;
    },
    /** Inserts campaigns in one statement; returns their ids. */
    async campaigns(agentId: string, count: number, options: { active?: boolean; paused?: boolean } = {}): Promise<string[]> {
      const ids = Array.from({ length: count }, () => randomUUID());
      await pool.query(
        `INSERT INTO campaigns (campaign_id, agent_id, active, paused)
         SELECT id, $2, $3, $4 FROM unnest($1::uuid[]) AS id`,
        [ids, agentId, options.active ?? true, options.paused ?? false],
      );
      return ids;
    },
    async agentApproved(agentId: string): Promise<boolean> {
      const { rows } = await pool.query('SELECT agent_approved FROM agents WHERE agent_id = $1', [agentId]);
      return rows[0].agent_approved;
    },
    async pausedIds(agentId: string): Promise<Set<string>> {
      const { rows } = await pool.query('SELECT campaign_id FROM campaigns WHERE agent_id = $1 AND paused', [agentId]);
      return new Set(rows.map((row) => row.campaign_id));
    },
    close: () => pool.end(),
  };
}

export type TestDatabase = ReturnType<typeof testDatabase>;

/** A fresh partner key, made at run time (never committed). */
export function newApiKey(): string {
  return `pk_test_${randomBytes(24).toString('base64url')}`;
}
