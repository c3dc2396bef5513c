// Authentication by partner key: docs/interfaces.md §3 and §4.
import { randomUUID } from 'node:crypto';
import { expect, expectProblem, test } from '../support/fixtures.js';
import { newPartnerKey } from '../support/partner-keys.js';

test.describe('A missing or unknown key yields 401', () => {
  test('a request without the x-api-key header gets 401', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const response = await api.setStatus({ key: null }, { agentId: agent.agentId, enabled: false });
    const problem = await expectProblem(response, 401, 'unauthorized');
    expect(problem.detail).toMatch(/x-api-key/);
  });

  test('a request with a key nobody issued gets 401, and the key is not echoed back', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const unknownKey = newPartnerKey();
    const response = await api.setStatus({ key: unknownKey }, { agentId: agent.agentId, enabled: false });
    const problem = await expectProblem(response, 401, 'unauthorized');
    expect(problem.detail).toMatch(/key/i);
    expect(await response.text()).not.toContain(unknownKey);
    expect(JSON.stringify(response.headers())).not.toContain(unknownKey);
  });

  test('the key is checked before the body: no key and an invalid body still get 401', async ({ api }) => {
    const response = await api.post({ headers: { 'content-type': 'application/json' }, data: '{"not":"valid"' });
    await expectProblem(response, 401, 'unauthorized');
  });

  test('a rejected request changes nothing', async ({ api, given, partners, seeder, stores }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    await expectProblem(await api.setStatus({ key: newPartnerKey() }, { agentId: agent.agentId, enabled: false }), 401, 'unauthorized');
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
    expect(await stores.pausedIn(agent.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
  });
});

test.describe('Only API-key authentication in the x-api-key header is accepted', () => {
  test('a valid key sent as Authorization: Bearer is ignored (401)', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open);
    const response = await api.setStatus(
      { key: null },
      { agentId: agent.agentId, enabled: false },
      { headers: { authorization: `Bearer ${partners.open.key}` } },
    );
    await expectProblem(response, 401, 'unauthorized');
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
  });

  test('a valid key sent as Authorization: ApiKey or Basic is ignored too (401)', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    for (const authorization of [`ApiKey ${partners.open.key}`, `Basic ${Buffer.from(`${partners.open.key}:`).toString('base64')}`]) {
      const response = await api.setStatus({ key: null }, { agentId: agent.agentId, enabled: false }, { headers: { authorization } });
      await expectProblem(response, 401, 'unauthorized');
    }
  });

  test('a valid key in the query string is ignored (401)', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open);
    const response = await request.post(`/partner/agents/status?x-api-key=${encodeURIComponent(partners.open.key)}`, {
      headers: { 'content-type': 'application/json' },
      data: JSON.stringify({ agentId: agent.agentId, enabled: false }),
      failOnStatusCode: false,
    });
    await expectProblem(response, 401, 'unauthorized');
  });
});

test.describe('A key acts only on agents of its own network', () => {
  test("another network's agent gets 404 and is left alone", async ({ api, given, partners, seeder, stores }) => {
    const theirs = await given.agent(partners.other, { campaigns: { unpaused: 3 } });
    const response = await api.setStatus(partners.open, { agentId: theirs.agentId, enabled: false });
    await expectProblem(response, 404, 'not-found');
    expect(await seeder.agentApproved(theirs.agentId)).toBe(true);
    expect(await stores.pausedIn(theirs.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });

    // An enable is refused the same way.
    const disabled = await given.agent(partners.other, { approved: false });
    await expectProblem(await api.setStatus(partners.open, { agentId: disabled.agentId, enabled: true }), 404, 'not-found');
    expect(await seeder.agentApproved(disabled.agentId)).toBe(false);
  });

  test("the 404 for another network's agent is the 404 for an agent that exists nowhere, apart from the request id", async ({
    api,
    given,
    partners,
  }) => {
    const theirs = await given.agent(partners.other);
    const nowhere = `us-east-1:${randomUUID()}`;
    const [a, b] = [
      await api.setStatus(partners.open, { agentId: theirs.agentId, enabled: false }),
      await api.setStatus(partners.open, { agentId: nowhere, enabled: false }),
    ];
    expect(a.status()).toBe(404);
    expect(b.status()).toBe(404);
    const withoutRequestId = async (response: typeof a) =>
      (await response.text()).replace(response.headers()['x-request-id']!, '<request-id>');
    expect(await withoutRequestId(a)).toBe(await withoutRequestId(b));
    for (const header of ['content-type', 'content-length']) expect(a.headers()[header], header).toBe(b.headers()[header]);
  });

  test('the network comes from the key: a networkId in the body is refused (400), never used', async ({ api, given, partners, seeder }) => {
    const theirs = await given.agent(partners.other);
    const response = await api.post({
      headers: { 'x-api-key': partners.open.key, 'content-type': 'application/json' },
      data: JSON.stringify({ agentId: theirs.agentId, enabled: false, networkId: partners.other.networkId }),
    });
    await expectProblem(response, 400, 'validation');
    expect(await seeder.agentApproved(theirs.agentId)).toBe(true);
  });

  test('the same agent is served to the key of its own network', async ({ api, given, partners }) => {
    const theirs = await given.agent(partners.other);
    const response = await api.setStatus(partners.other, { agentId: theirs.agentId, enabled: false });
    expect(response.status()).toBe(200);
    expect(await response.json()).toMatchObject({ agentId: theirs.agentId, networkId: partners.other.networkId, enabled: false });
  });
});
