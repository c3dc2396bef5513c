// Enabling an agent: docs/interfaces.md §3 and §5.
import { expect, test } from '../support/fixtures.js';

test.describe('Enabling an agent sets agentApproved to true and resumes nothing', () => {
  test('an enable answers 200 with enabled true and pausedCampaignCount 0', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open, { approved: false });
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
    expect(response.status()).toBe(200);
    expect(await response.json()).toEqual({
      agentId: agent.agentId,
      networkId: partners.open.networkId,
      enabled: true,
      pausedCampaignCount: 0,
    });
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
  });

  test('campaigns paused by a disable stay paused in all three places after a later enable', async ({
    api,
    given,
    partners,
    seeder,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    expect((await (await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false })).json()).pausedCampaignCount).toBe(3);

    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
    expect(await response.json()).toMatchObject({ enabled: true, pausedCampaignCount: 0 });
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({
      database: agent.unpaused,
      redis: agent.unpaused,
      spendManagement: agent.unpaused,
    });
  });

  test('an enable does not touch unpaused or paused campaigns', async ({ api, given, partners, simulator, stores }) => {
    const agent = await given.agent(partners.open, { approved: false, campaigns: { unpaused: 2, paused: 1 } });
    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
    expect(await stores.pausedIn([...agent.unpaused, ...agent.paused])).toEqual({ database: agent.paused, redis: [], spendManagement: [] });
    expect(await simulator.requestsFor([...agent.unpaused, ...agent.paused])).toEqual([]);
  });

  test('enabling an agent that is already approved answers 200 the same way', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open);
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
    expect(await response.json()).toEqual({
      agentId: agent.agentId,
      networkId: partners.open.networkId,
      enabled: true,
      pausedCampaignCount: 0,
    });
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
  });
});
