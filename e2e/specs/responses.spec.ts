// docs/interfaces.md §3: x-request-id on every response, errors as RFC 9457 problems.
import { randomUUID } from 'node:crypto';
import { expect, expectProblem, mediaType, test } from '../support/fixtures.js';

const saneRequestId = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

test.describe('Every response carries x-request-id', () => {
  test("the caller's well-formed x-request-id is echoed, on success and on errors", async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const answers = [
      [200, partners.open, JSON.stringify({ agentId: agent.agentId, enabled: true })],
      [400, partners.open, '{"agentId": 1}'],
      [401, { key: 'pk_e2e_nobody_issued_this_key' }, JSON.stringify({ agentId: agent.agentId, enabled: true })],
      [404, partners.open, JSON.stringify({ agentId: `us-east-1:${randomUUID()}`, enabled: true })],
    ] as const;
    for (const [status, partner, data] of answers) {
      const requestId = `e2e-${randomUUID()}`;
      const response = await api.post({
        headers: { 'content-type': 'application/json', 'x-api-key': partner.key, 'x-request-id': requestId },
        data,
      });
      expect(response.status()).toBe(status);
      expect(response.headers()['x-request-id'], `status ${status}`).toBe(requestId);
      if (status !== 200) expect((await response.json()).requestId).toBe(requestId);
    }
  });

  test('without one, each response gets a fresh id of its own', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const ids = new Set<string>();
    for (let i = 0; i < 3; i += 1) {
      const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
      const id = response.headers()['x-request-id'];
      expect(id).toMatch(saneRequestId);
      ids.add(id!);
    }
    expect(ids.size).toBe(3);
  });

  test('a malformed x-request-id is replaced, not echoed', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    for (const bad of ['has spaces in it', 'x'.repeat(129), 'semi;colon<tag>']) {
      const response = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true }, { headers: { 'x-request-id': bad } });
      expect(response.status()).toBe(200);
      const id = response.headers()['x-request-id'];
      expect(id).not.toBe(bad);
      expect(id).toMatch(saneRequestId);
    }
  });
});

test.describe('Every error is an application/problem+json document', () => {
  test('400, 401, 404, 413 and 415 share the problem shape: type, title, status, detail, requestId', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const key = partners.open.key;
    const cases: Array<{ status: number; kind: string; headers: Record<string, string>; data: string }> = [
      { status: 400, kind: 'validation', headers: { 'content-type': 'application/json', 'x-api-key': key }, data: '{' },
      { status: 401, kind: 'unauthorized', headers: { 'content-type': 'application/json' }, data: '{}' },
      {
        status: 404,
        kind: 'not-found',
        headers: { 'content-type': 'application/json', 'x-api-key': key },
        data: JSON.stringify({ agentId: `us-east-1:${randomUUID()}`, enabled: false }),
      },
      {
        status: 413,
        kind: 'payload-too-large',
        headers: { 'content-type': 'application/json', 'x-api-key': key },
        data: JSON.stringify({ agentId: agent.agentId, enabled: false, pad: 'x'.repeat(20_000) }),
      },
      { status: 415, kind: 'unsupported-media-type', headers: { 'content-type': 'text/plain', 'x-api-key': key }, data: 'disable' },
    ];
    for (const { status, kind, headers, data } of cases) {
      const problem = await expectProblem(await api.post({ headers, data }), status, kind);
      expect(Object.keys(problem).sort()).toEqual(['detail', 'requestId', 'status', 'title', 'type']);
    }
  });

  test('a path that is not a route is a 404 problem too', async ({ request }) => {
    const response = await request.get('/partner/agents/no-such-route', { failOnStatusCode: false });
    await expectProblem(response, 404, 'not-found');
  });

  test('a method the route does not have is a 405 problem', async ({ request, partners }) => {
    const response = await request.get('/partner/agents/status', { headers: { 'x-api-key': partners.open.key }, failOnStatusCode: false });
    await expectProblem(response, 405, 'method-not-allowed');
  });

  test('a success is plain application/json, never a problem', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    expect(mediaType(await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true }))).toBe('application/json');
  });
});
