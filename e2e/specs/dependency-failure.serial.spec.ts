// docs/interfaces.md §3 (500 when pausing fails) and §7 (consistency of a disable). The
// simulator's mode is global state: this file runs in the `shared-simulator` project, after every
// other spec, one test at a time, and puts the simulator back to `ok` after each test whatever
// happened.
import { expect, expectProblem, test } from '../support/fixtures.js';

test.describe.configure({ mode: 'serial' });

test.afterEach(async ({ simulator }) => {
  await simulator.setMode('ok');
});

test.describe('When spend management fails, the disable answers 500 and a retry completes it', () => {
  test('spend management refusing every pause: 500, the agent stays disabled, nothing is marked paused; the retry pauses all', async ({
    api,
    given,
    partners,
    seeder,
    simulator,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 5 } });
    await simulator.setMode('fail', { failStatus: 503 });

    const failed = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    const problem = await expectProblem(failed, 500, 'dependency-failure');
    // The problem names no internals.
    expect(JSON.stringify(problem)).not.toMatch(/503|spend|redis|simulat/i);
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });

    await simulator.setMode('ok');
    const retried = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(retried.status()).toBe(200);
    expect(await retried.json()).toEqual({
      agentId: agent.agentId,
      networkId: partners.open.networkId,
      enabled: false,
      pausedCampaignCount: 5,
    });
    expect(await stores.pausedIn(agent.unpaused)).toEqual({
      database: agent.unpaused,
      redis: agent.unpaused,
      spendManagement: agent.unpaused,
    });
  });

  test('a failure after the first batch: what the database calls paused is paused everywhere, and the retry counts the rest', async ({
    api,
    given,
    partners,
    simulator,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 150 } });
    // The first pause call (one batch of at most 100) succeeds, every later one fails.
    await simulator.setMode('fail', { failAfter: 1, failStatus: 502 });

    await expectProblem(await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }), 500, 'dependency-failure');
    const partial = await stores.pausedIn(agent.unpaused);
    expect(partial.database.length).toBeGreaterThan(0);
    expect(partial.database.length).toBeLessThan(150);
    // Paused in the database implies paused in Redis and in spend management.
    expect(partial.database.filter((id) => !partial.redis.includes(id))).toEqual([]);
    expect(partial.database.filter((id) => !partial.spendManagement.includes(id))).toEqual([]);

    await simulator.setMode('ok');
    const retried = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await retried.json()).pausedCampaignCount).toBe(150 - partial.database.length);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({
      database: agent.unpaused,
      redis: agent.unpaused,
      spendManagement: agent.unpaused,
    });
  });

  test('spend management not answering at all: 500 within the time-outs, and the retry completes', async ({
    api,
    given,
    partners,
    seeder,
    simulator,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    await simulator.setMode('hang');

    const started = Date.now();
    await expectProblem(await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }), 500, 'dependency-failure');
    // Two attempts of SPEND_MANAGEMENT_TIMEOUT_MS (1 s locally, 2 s in the dev chart) and a little.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
    expect((await stores.pausedIn(agent.unpaused)).database).toEqual([]);

    await simulator.setMode('ok');
    const retried = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect((await retried.json()).pausedCampaignCount).toBe(2);
  });

  test('an enable does not depend on spend management: it succeeds while spend management fails', async ({
    api,
    given,
    partners,
    seeder,
    simulator,
  }) => {
    const agent = await given.agent(partners.open, { approved: false });
    await simulator.setMode('fail');
    const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
    expect(await response.json()).toMatchObject({ enabled: true, pausedCampaignCount: 0 });
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
  });
});
