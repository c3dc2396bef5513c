// docs/interfaces.md §9: GET /partner/agents/{agentId}/status reads an agent of the key's network:
// 200 {agentId, networkId, enabled, activeUnpausedCampaignCount, disableInProgress}; the agent id as
// is (colon included) or percent-encoded; 400 for a malformed id; the same 401 and identical 404s
// as the POST. It never changes anything.
import { randomUUID } from 'node:crypto';
import type { APIRequestContext, APIResponse } from '@playwright/test';
import { expect, expectProblem, mediaType, type Partner, test } from '../support/fixtures.js';
import { newPartnerKey } from '../support/partner-keys.js';

/** GET the status with the agent id placed in the path exactly as given (no encoding added). */
function readStatus(request: APIRequestContext, key: string | null, agentIdInPath: string): Promise<APIResponse> {
  return request.get(`/partner/agents/${agentIdInPath}/status`, {
    headers: key === null ? {} : { 'x-api-key': key },
    failOnStatusCode: false,
  });
}

async function expectStatus(
  response: APIResponse,
  partner: Partner,
  expected: { agentId: string; enabled: boolean; activeUnpausedCampaignCount: number; disableInProgress: boolean },
) {
  expect(response.status(), await response.text()).toBe(200);
  expect(mediaType(response)).toBe('application/json');
  expect(await response.json()).toEqual({ networkId: partner.networkId, ...expected });
}

test.describe("GET /partner/agents/{agentId}/status reads an agent of the key's network", () => {
  test('a new agent: enabled, its active unpaused campaigns counted, no disable in progress', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2, paused: 1, inactive: 1 } });
    await expectStatus(await readStatus(request, partners.open.key, agent.agentId), partners.open, {
      agentId: agent.agentId,
      enabled: true,
      activeUnpausedCampaignCount: 2,
      disableInProgress: false,
    });
  });

  test('after a disable has answered 200: enabled false, nothing left unpaused, no disable in progress', async ({
    api,
    request,
    given,
    partners,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    const disable = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    expect(disable.status(), await disable.text()).toBe(200);
    await expectStatus(await readStatus(request, partners.open.key, agent.agentId), partners.open, {
      agentId: agent.agentId,
      enabled: false,
      activeUnpausedCampaignCount: 0,
      disableInProgress: false,
    });
  });

  test('after an enable: enabled true, and the campaigns the disable paused stay paused', async ({ api, request, given, partners }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    expect((await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false })).status()).toBe(200);
    expect((await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true })).status()).toBe(200);
    await expectStatus(await readStatus(request, partners.open.key, agent.agentId), partners.open, {
      agentId: agent.agentId,
      enabled: true,
      activeUnpausedCampaignCount: 0,
      disableInProgress: false,
    });
  });

  test('the colon of the agent id may be sent raw or percent-encoded: the same answer', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open, { approved: false, campaigns: { unpaused: 1 } });
    const raw = await readStatus(request, partners.open.key, agent.agentId);
    const encoded = await readStatus(request, partners.open.key, agent.agentId.replace(':', '%3A'));
    const lowerEncoded = await readStatus(request, partners.open.key, agent.agentId.replace(':', '%3a'));
    const expected = { agentId: agent.agentId, enabled: false, activeUnpausedCampaignCount: 1, disableInProgress: false };
    for (const response of [raw, encoded, lowerEncoded]) await expectStatus(response, partners.open, expected);
  });

  test('reading changes nothing', async ({ request, given, partners, seeder, stores }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    for (let i = 0; i < 2; i += 1) expect((await readStatus(request, partners.open.key, agent.agentId)).status()).toBe(200);
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
  });
});

test.describe('GET /partner/agents/{agentId}/status refuses what the POST refuses', () => {
  const malformed: Array<[string, (agentId: string) => string]> = [
    ['without the region prefix', (agentId) => agentId.slice('us-east-1:'.length)],
    ['in another region', (agentId) => agentId.replace('us-east-1:', 'eu-west-1:')],
    ['with an upper-case uuid', (agentId) => `us-east-1:${agentId.slice('us-east-1:'.length).toUpperCase()}`],
    ['with something that is not a uuid', () => 'us-east-1:not-a-uuid'],
  ];
  for (const [name, malform] of malformed) {
    test(`an agent id ${name} gets 400`, async ({ request, given, partners }) => {
      const agent = await given.agent(partners.open);
      await expectProblem(await readStatus(request, partners.open.key, encodeURIComponent(malform(agent.agentId))), 400, 'validation');
    });
  }

  test('no key gets 401, whatever the agent id', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open);
    await expectProblem(await readStatus(request, null, agent.agentId), 401, 'unauthorized');
    await expectProblem(await readStatus(request, null, 'us-east-1:not-a-uuid'), 401, 'unauthorized');
  });

  test('a key nobody issued gets 401, and it is not echoed back', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open);
    const unknownKey = newPartnerKey();
    const response = await readStatus(request, unknownKey, agent.agentId);
    await expectProblem(response, 401, 'unauthorized');
    expect(await response.text()).not.toContain(unknownKey);
  });

  test("another network's agent gets the 404 of an agent that exists nowhere, byte for byte apart from the request id", async ({
    request,
    given,
    partners,
  }) => {
    const theirs = await given.agent(partners.other, { campaigns: { unpaused: 1 } });
    const nowhere = `us-east-1:${randomUUID()}`;
    const [a, b] = [await readStatus(request, partners.open.key, theirs.agentId), await readStatus(request, partners.open.key, nowhere)];
    await expectProblem(a, 404, 'not-found');
    await expectProblem(b, 404, 'not-found');
    const withoutRequestId = async (response: APIResponse) =>
      (await response.text()).replace(response.headers()['x-request-id']!, '<request-id>');
    expect(await withoutRequestId(a)).toBe(await withoutRequestId(b));
    for (const header of ['content-type', 'content-length']) expect(a.headers()[header], header).toBe(b.headers()[header]);
  });
});
