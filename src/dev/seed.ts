import { insertAgent, insertCampaigns, insertNetwork, type Queryable } from '../../test/support/platform-rows.js';

// The rows are written by the tests' own platform-row writers, shared with `npm run dev` only: this
// folder is not part of the image (scripts/build.ts bundles src/main.ts and its imports), and no
// module of the image imports test/ (test/unit/layout.test.ts).

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
