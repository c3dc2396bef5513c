// docs/interfaces.md §16: POST /partner/agents/status/batch, as a partner's tooling sees it: one
// result per change in request order, each the single call's status and body; the whole batch
// refused (400 naming the first bad change) changes nothing; respond-async and the batch resource.
import { randomUUID } from 'node:crypto';
import type { APIRequestContext } from '@playwright/test';
import { expect, expectProblem, mediaType, type Partner, test } from '../support/fixtures.js';

function postBatch(request: APIRequestContext, partner: Partner, changes: unknown, headers: Record<string, string> = {}) {
  return request.post('/partner/agents/status/batch', {
    headers: { 'content-type': 'application/json', 'x-api-key': partner.key, ...headers },
    data: JSON.stringify({ changes }),
    failOnStatusCode: false,
  });
}

interface Results {
  batchId: string;
  results: Array<{ agentId: string; status: number; body: Record<string, unknown> }>;
}

test.describe('POST /partner/agents/status/batch', () => {
  test('answers each change as the single call would, in request order', async ({ request, given, partners, stores }) => {
    const disabled = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    const enabled = await given.agent(partners.open, { approved: false });
    const foreign = await given.agent(partners.other, { campaigns: { unpaused: 1 } });
    const unknown = `us-east-1:${randomUUID()}`;
    const response = await postBatch(request, partners.open, [
      { agentId: disabled.agentId, enabled: false },
      { agentId: foreign.agentId, enabled: false },
      { agentId: enabled.agentId, enabled: true },
      { agentId: unknown, enabled: true },
    ]);
    expect(response.status(), await response.text()).toBe(200);
    expect(mediaType(response)).toBe('application/json');
    const body = (await response.json()) as Results;
    expect(body.results.map((r) => [r.agentId, r.status])).toEqual([
      [disabled.agentId, 200],
      [foreign.agentId, 404],
      [enabled.agentId, 200],
      [unknown, 404],
    ]);
    expect(body.results[0]!.body).toEqual({
      agentId: disabled.agentId,
      networkId: partners.open.networkId,
      enabled: false,
      pausedCampaignCount: 3,
    });
    expect(body.results[2]!.body).toEqual({
      agentId: enabled.agentId,
      networkId: partners.open.networkId,
      enabled: true,
      pausedCampaignCount: 0,
    });
    // Another network's agent and an agent of none: the same 404 apart from nothing (one request id).
    expect(body.results[1]!.body).toEqual(body.results[3]!.body);
    const paused = await stores.pausedIn(disabled.unpaused);
    expect(paused.spendManagement.sort()).toEqual([...disabled.unpaused].sort());
    expect(await stores.pausedIn(foreign.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
  });

  test('refuses a batch naming one agent twice with a 400 that points at the repeat, and changes nothing', async ({
    request,
    given,
    partners,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    const other = await given.agent(partners.open);
    const response = await postBatch(request, partners.open, [
      { agentId: other.agentId, enabled: true },
      { agentId: agent.agentId, enabled: false },
      { agentId: agent.agentId, enabled: false },
    ]);
    const problem = await expectProblem(response, 400, 'validation');
    expect(problem.errors).toEqual([{ pointer: '/changes/2/agentId', detail: expect.any(String) }]);
    expect((await stores.pausedIn(agent.unpaused)).database).toEqual([]);
  });

  test('answers 202 with the batch resource under Prefer: respond-async; the resource is the network’s only', async ({
    request,
    given,
    partners,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    const response = await postBatch(request, partners.open, [{ agentId: agent.agentId, enabled: false }], { prefer: 'respond-async' });
    expect(response.status(), await response.text()).toBe(202);
    const location = response.headers().location!;
    expect(location).toMatch(/^\/partner\/agents\/status\/batch\/[0-9a-f-]{36}$/);
    await expect
      .poll(async () => {
        const read = await request.get(location, { headers: { 'x-api-key': partners.open.key }, failOnStatusCode: false });
        return ((await read.json()) as Results).results.map((r) => r.status);
      })
      .toEqual([200]);
    const foreign = await request.get(location, { headers: { 'x-api-key': partners.other.key }, failOnStatusCode: false });
    await expectProblem(foreign, 404, 'not-found');
  });
});
