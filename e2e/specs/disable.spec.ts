// Disabling an agent: docs/interfaces.md §3, §5 and §6.
import { expect, test } from '../support/fixtures.js';

test.describe('Disabling an agent sets agentApproved to false and pauses its active, unpaused campaigns in all three places', () => {
  test("a disable answers 200 with the agent, the key's network, enabled false and the number paused", async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(response.status()).toBe(200);
    expect(response.headers()['content-type']).toMatch(/^application\/json/);
    expect(await response.json()).toEqual({
      agentId: agent.agentId,
      networkId: partners.open.networkId,
      enabled: false,
      pausedCampaignCount: 3,
    });
  });

  test('the agent is no longer approved in the database', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open);
    expect((await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false })).status()).toBe(200);
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
  });

  test('each active, unpaused campaign is paused in the database, in Redis and in spend management', async ({
    api,
    given,
    partners,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 4 } });
    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(await stores.pausedIn(agent.unpaused)).toEqual({
      database: agent.unpaused,
      redis: agent.unpaused,
      spendManagement: agent.unpaused,
    });
  });

  test('inactive campaigns and campaigns already paused are not touched or counted', async ({
    api,
    given,
    partners,
    seeder,
    stores,
    simulator,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2, paused: 2, inactive: 2 } });
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await response.json()).pausedCampaignCount).toBe(2);

    expect(await seeder.pausedInDatabase(agent.agentId)).toEqual([...agent.unpaused, ...agent.paused].sort());
    // The already paused and the inactive ones were never sent anywhere.
    const untouched = [...agent.paused, ...agent.inactive];
    expect(await stores.pausedIn(untouched)).toEqual({ database: agent.paused, redis: [], spendManagement: [] });
    expect(await simulator.requestsFor(untouched)).toEqual([]);
  });

  test('pausing sets the Redis field paused = 1 and leaves the other fields of the hash alone', async ({
    api,
    given,
    partners,
    seeder,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    const [withHash, withoutHash] = agent.unpaused as [string, string];
    await seeder.setCampaignHash(withHash, { budget: '250.00', paused: '0', owner: 'someone' });

    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(await seeder.campaignHash(withHash)).toEqual({ budget: '250.00', paused: '1', owner: 'someone' });
    expect(await seeder.campaignHash(withoutHash)).toEqual({ paused: '1' });
  });

  test('many campaigns are paused in batches of at most 100, each call with its own idempotency key', async ({
    api,
    given,
    partners,
    simulator,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 250 } });
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await response.json()).pausedCampaignCount).toBe(250);

    const calls = await simulator.requestsFor(agent.unpaused);
    expect(calls.length).toBeGreaterThanOrEqual(3);
    for (const call of calls) expect(call.campaignIds.length).toBeLessThanOrEqual(100);
    expect(new Set(calls.map((call) => call.idempotencyKey)).size).toBe(calls.length);
    expect(new Set(calls.flatMap((call) => call.campaignIds))).toEqual(new Set(agent.unpaused));

    const paused = await stores.pausedIn(agent.unpaused);
    expect(paused.database).toHaveLength(250);
    expect(paused.redis).toHaveLength(250);
    expect(paused.spendManagement).toHaveLength(250);
  });

  test('an agent without campaigns is disabled with pausedCampaignCount 0', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open);
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(await response.json()).toMatchObject({ enabled: false, pausedCampaignCount: 0 });
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
  });

  test("other agents' campaigns, in the same network, stay unpaused", async ({ api, given, partners, seeder, stores }) => {
    const target = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    const bystander = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    await api.setStatus(partners.open, { agentId: target.agentId, enabled: false });
    expect(await seeder.agentApproved(bystander.agentId)).toBe(true);
    expect(await stores.pausedIn(bystander.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
  });

  test('an agent that was already not approved is disabled the same way', async ({ api, given, partners, stores }) => {
    const agent = await given.agent(partners.open, { approved: false, campaigns: { unpaused: 2 } });
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await response.json()).pausedCampaignCount).toBe(2);
    expect((await stores.pausedIn(agent.unpaused)).database).toEqual(agent.unpaused);
  });
});
