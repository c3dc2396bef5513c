import { randomUUID } from 'node:crypto';

/**
 * The platform's rows (CONTRACT.md section 5) written straight into PostgreSQL, the way the
 * platform itself writes them, for everything that needs data the service did not make:
 * `npm run dev`'s demo data, the vitest helpers (test/support/data.ts) and the e2e seeder
 * (e2e/support/seeder.ts), which each reach their database differently. Not part of the
 * production build (scripts/build.ts bundles only what the image runs).
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

export interface DemoData {
  networkId: string;
  /** An agent of the demo network with `campaignCount` active, unpaused campaigns. */
  agentId: string;
  campaignCount: number;
  otherAgentId: string;
  /** An agent of another network: the demo key gets 404 for it. */
  foreignAgentId: string;
}

/**
 * `npm run dev`'s demo: a network that requires agent approval, an agent with 12 active unpaused
 * campaigns beside one inactive and two paused ones (a disable pauses 12), a second agent with one
 * campaign, and an agent of another network.
 */
export async function seedDemo(db: Queryable): Promise<DemoData> {
  const networkId = await insertNetwork(db, { requireAgentApproval: true });
  const otherNetworkId = await insertNetwork(db);
  const agentId = await insertAgent(db, networkId);
  const otherAgentId = await insertAgent(db, networkId);
  const foreignAgentId = await insertAgent(db, otherNetworkId);
  const campaignCount = 12;
  await insertCampaigns(db, agentId, campaignCount);
  await insertCampaigns(db, agentId, 1, { active: false });
  await insertCampaigns(db, agentId, 2, { paused: true });
  await insertCampaigns(db, otherAgentId, 1);
  await insertCampaigns(db, foreignAgentId, 1);
  return { networkId, agentId, campaignCount, otherAgentId, foreignAgentId };
}
