// docs/interfaces.md §15: what API version 2026-12-01 changes. A disable recorded but not finished
// by its answer (spend management failing) answers 202 with Location and the status, and completes
// by itself; under 2026-11-21 the same answers 500 with the counts. The simulator's mode is global
// state: this file runs in the `shared-simulator` project, one test at a time.
import { expect, expectProblem, test } from '../support/fixtures.js';

test.describe.configure({ mode: 'serial' });

test.afterEach(async ({ simulator }) => {
  await simulator.setMode('ok');
});

test.describe('A disable spend management fails', () => {
  test('answers 500 with pausedCampaignCount and remainingCampaignCount under 2026-11-21', async ({ api, given, partners, simulator }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    await simulator.setMode('fail', { failStatus: 503 });
    const response = await api.setStatus(
      partners.open,
      { agentId: agent.agentId, enabled: false },
      { headers: { 'partner-api-version': '2026-11-21' } },
    );
    const problem = await expectProblem(response, 500, 'dependency-failure');
    expect(problem).toMatchObject({ pausedCampaignCount: 0, remainingCampaignCount: 3 });
    expect(response.headers()['partner-api-version']).toBe('2026-11-21');
  });

  test('answers 202 with Location and the status under 2026-12-01, and completes by itself', async ({
    api,
    request,
    given,
    partners,
    simulator,
    stores,
  }) => {
    // The worker retries with backoff: it finishes within 60 s of spend management answering again.
    test.setTimeout(120_000);
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    await simulator.setMode('fail', { failStatus: 503 });
    const response = await api.setStatus(
      partners.open,
      { agentId: agent.agentId, enabled: false },
      { headers: { 'partner-api-version': '2026-12-01' } },
    );
    expect(response.status(), await response.text()).toBe(202);
    expect(response.headers()['partner-api-version']).toBe('2026-12-01');
    expect(response.headers().location).toBe(`/partner/agents/${agent.agentId}/status`);
    expect(await response.json()).toEqual({
      agentId: agent.agentId,
      networkId: partners.open.networkId,
      enabled: false,
      activeUnpausedCampaignCount: 3,
      disableInProgress: true,
    });

    await simulator.setMode('ok');
    await expect
      .poll(
        async () => {
          const status = await request.get(response.headers().location!, { headers: { 'x-api-key': partners.open.key } });
          return (await status.json()).disableInProgress;
        },
        { timeout: 90_000, intervals: [500] },
      )
      .toBe(false);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({
      database: agent.unpaused,
      redis: agent.unpaused,
      spendManagement: agent.unpaused,
    });
  });
});
