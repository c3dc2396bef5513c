// docs/interfaces.md §3 (idempotence) and §7 (counting).
import { expect, test } from '../support/fixtures.js';

test.describe('Repeating a request is always safe', () => {
  test('a second disable answers 200 with pausedCampaignCount 0 and changes nothing', async ({
    api,
    given,
    partners,
    seeder,
    simulator,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    const first = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await first.json()).pausedCampaignCount).toBe(3);
    const callsAfterFirst = (await simulator.requestsFor(agent.unpaused)).length;

    const second = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(second.status()).toBe(200);
    expect(await second.json()).toEqual({
      agentId: agent.agentId,
      networkId: partners.open.networkId,
      enabled: false,
      pausedCampaignCount: 0,
    });
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({
      database: agent.unpaused,
      redis: agent.unpaused,
      spendManagement: agent.unpaused,
    });
    // Nothing was left to pause, so nothing was sent again.
    expect(await simulator.requestsFor(agent.unpaused)).toHaveLength(callsAfterFirst);
  });

  test('a second enable answers 200 with pausedCampaignCount 0', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open, { approved: false });
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
      expect(await response.json()).toMatchObject({ enabled: true, pausedCampaignCount: 0 });
    }
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
  });

  test('a repeated disable counts only the campaigns that became unpaused since', async ({ api, given, partners, seeder, stores }) => {
    // A network without require_agent_approval: a disabled agent may still get new campaigns.
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    const [added] = await seeder.campaigns(agent.agentId, 1);

    const again = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await again.json()).pausedCampaignCount).toBe(1);
    expect(await stores.pausedIn([added!])).toEqual({ database: [added], redis: [added], spendManagement: [added] });
  });

  test('concurrent disables of one agent never count a campaign twice', async ({ api, given, partners, stores }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 120 } });
    const responses = await Promise.all(
      Array.from({ length: 5 }, () => api.setStatus(partners.open, { agentId: agent.agentId, enabled: false })),
    );
    for (const response of responses) expect(response.status()).toBe(200);
    const counts = await Promise.all(responses.map(async (response) => (await response.json()).pausedCampaignCount as number));
    expect(counts.reduce((sum, count) => sum + count, 0)).toBe(120);
    const paused = await stores.pausedIn(agent.unpaused);
    expect(paused.database).toHaveLength(120);
    expect(paused.redis).toHaveLength(120);
    expect(paused.spendManagement).toHaveLength(120);
  });

  test('disable, enable, disable: the second disable finds nothing left to pause', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    const counts: number[] = [];
    for (const enabled of [false, true, false]) {
      counts.push((await (await api.setStatus(partners.open, { agentId: agent.agentId, enabled })).json()).pausedCampaignCount);
    }
    expect(counts).toEqual([2, 0, 0]);
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
  });
});
