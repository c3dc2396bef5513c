// Restrictions while an agent is disabled (docs/interfaces.md §5): the database
// itself refuses what it can see (SQLSTATE P0001) and tells the platform through
// agent_is_restricted(). Checked through the seeder's own connection, as another part of the
// platform would meet it.
import { expect, test } from '../support/fixtures.js';

test.describe('A disabled agent in a network that requires agent approval is restricted', () => {
  test('it cannot get a new campaign (P0001)', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.strict);
    expect((await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: false })).status()).toBe(200);
    await expect(seeder.campaigns(agent.agentId, 1)).rejects.toMatchObject({
      code: 'P0001',
      message: expect.stringMatching(/create_campaign is not allowed/),
    });
  });

  test('its paused campaigns cannot be unpaused (P0001)', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.strict, { campaigns: { unpaused: 1 } });
    await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: false });
    await expect(seeder.unpause(agent.unpaused[0]!)).rejects.toMatchObject({
      code: 'P0001',
      message: expect.stringMatching(/unpause_campaign is not allowed/),
    });
    expect(await seeder.pausedInDatabase(agent.agentId)).toEqual(agent.unpaused);
  });

  test('agent_is_restricted() says so, for the operations the database cannot see (bulk leads, transfers, groups, deposits)', async ({
    api,
    given,
    partners,
    seeder,
  }) => {
    const agent = await given.agent(partners.strict);
    expect(await seeder.isRestricted(agent.agentId)).toBe(false);
    await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: false });
    expect(await seeder.isRestricted(agent.agentId)).toBe(true);
  });

  test('after an enable the restrictions are lifted: campaigns can be created and unpaused again', async ({
    api,
    given,
    partners,
    seeder,
  }) => {
    const agent = await given.agent(partners.strict, { campaigns: { unpaused: 1 } });
    await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: false });
    await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: true });

    expect(await seeder.isRestricted(agent.agentId)).toBe(false);
    // The enable itself resumed nothing; resuming is the agent's or a manager's own step.
    expect(await seeder.pausedInDatabase(agent.agentId)).toEqual(agent.unpaused);
    await seeder.unpause(agent.unpaused[0]!);
    expect(await seeder.pausedInDatabase(agent.agentId)).toEqual([]);
    await expect(seeder.campaigns(agent.agentId, 1)).resolves.toHaveLength(1);
  });
});

test.describe('Without require_agent_approval a disabled agent is not restricted', () => {
  test('it can still get campaigns and have them unpaused', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 1 } });
    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(await seeder.isRestricted(agent.agentId)).toBe(false);
    await expect(seeder.campaigns(agent.agentId, 1)).resolves.toHaveLength(1);
    await seeder.unpause(agent.unpaused[0]!);
  });
});
