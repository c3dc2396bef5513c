import { randomUUID } from 'node:crypto';

/**
 * The platform's rows (docs/interfaces.md §5) written straight into PostgreSQL, the way the platform
 * itself writes them, for everything that needs data the service did not make: the vitest helpers
 * (data.ts), the e2e seeder (e2e/support/seeder.ts), the benchmark, and `npm run dev`'s demo data
 * (src/dev/seed.ts), which each reach their database differently. Test support: no module of the
 * image imports it (test/unit/layout.test.ts).
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

export async function insertNetwork(db: Queryable, options: { requireAgentApproval?: boolean } = {}): Promise<string> {
  const networkId = randomUUID();
  await db.query('INSERT INTO networks (network_id, require_agent_approval) VALUES ($1, $2)', [
    networkId,
    options.requireAgentApproval ?? false,
  ]);
  return networkId;
}

export async function insertAgent(db: Queryable, networkId: string, options: { approved?: boolean } = {}): Promise<string> {
  const agentId = `us-east-1:${randomUUID()}`;
  await db.query('INSERT INTO agents (agent_id, network_id, agent_approved) VALUES ($1, $2, $3)', [
    agentId,
    networkId,
    options.approved ?? true,
  ]);
  return agentId;
}

/** Inserts `count` campaigns of one agent in one statement; returns their ids. */
export async function insertCampaigns(
  db: Queryable,
  agentId: string,
  count: number,
  options: { active?: boolean; paused?: boolean } = {},
): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  await db.query(
    `INSERT INTO campaigns (campaign_id, agent_id, active, paused)
     SELECT id, $2, $3, $4 FROM unnest($1::uuid[]) AS id`,
    [ids, agentId, options.active ?? true, options.paused ?? false],
  );
  return ids;
}
