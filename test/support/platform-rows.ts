import { randomUUID } from 'node:crypto';
import type pg from 'pg';

/**
 * The platform's rows as the platform itself writes them (CONTRACT.md section 5), straight into
 * PostgreSQL. Shared by the vitest helpers (test/support/data.ts) and the e2e seeder
 * (e2e/support/seeder.ts), which reach their database differently but seed it the same way.
 */
export async function insertNetwork(pool: pg.Pool, options: { requireAgentApproval?: boolean } = {}): Promise<string> {
  const networkId = randomUUID();
  await pool.query('INSERT INTO networks (network_id, require_agent_approval) VALUES ($1, $2)', [
    networkId,
    options.requireAgentApproval ?? false,
  ]);
  return networkId;
}

export async function insertAgent(pool: pg.Pool, networkId: string, options: { approved?: boolean } = {}): Promise<string> {
  const agentId = `us-east-1:${randomUUID()}`;
  await pool.query('INSERT INTO agents (agent_id, network_id, agent_approved) VALUES ($1, $2, $3)', [
    agentId,
    networkId,
    options.approved ?? true,
  ]);
  return agentId;
}

/** Inserts `count` campaigns of one agent in one statement; returns their ids. */
export async function insertCampaigns(
  pool: pg.Pool,
  agentId: string,
  count: number,
  options: { active?: boolean; paused?: boolean } = {},
): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  await pool.query(
    `INSERT INTO campaigns (campaign_id, agent_id, active, paused)
     SELECT id, $2, $3, $4 FROM unnest($1::uuid[]) AS id`,
    [ids, agentId, options.active ?? true, options.paused ?? false],
  );
  return ids;
}
