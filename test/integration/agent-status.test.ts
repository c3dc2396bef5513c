import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { injectStatusBody, statusPath } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
let svc: TestService;
let networkA: string;
let networkB: string;
const keyA = newApiKey();
const keyB = newApiKey();

beforeAll(async () => {
  networkA = await db.network();
  networkB = await db.network();
  svc = await startTestService({
    partners: [
      { key: keyA, networkId: networkA, name: 'partner-a' },
      { key: keyB, networkId: networkB, name: 'partner-b' },
    ],
  });
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

function post(body: unknown, headers: Record<string, string> = { 'x-api-key': keyA }) {
  return injectStatusBody(svc.app, undefined, body, headers);
}

describe('disable: agentApproved becomes false and every active, unpaused campaign is paused in all three places', () => {
  it('pauses exactly the active, unpaused campaigns and counts them', async () => {
    const agentId = await db.agent(networkA);
    const live = await db.campaigns(agentId, 3);
    const inactive = await db.campaigns(agentId, 2, { active: false });
    const alreadyPaused = await db.campaigns(agentId, 2, { paused: true });

    const response = await post({ agentId, enabled: false });

    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ agentId, networkId: networkA, enabled: false, pausedCampaignCount: 3 });
    expect(await db.agentApproved(agentId)).toBe(false);
    expect(await db.pausedIds(agentId)).toEqual(new Set([...live, ...alreadyPaused]));
    expect(await svc.pausedInRedis(live)).toEqual([true, true, true]);
    expect(live.every((id) => svc.sim.isPaused(id))).toBe(true);
    // Nothing else was sent anywhere.
    expect(await svc.pausedInRedis([...inactive, ...alreadyPaused])).toEqual([false, false, false, false]);
    expect([...inactive, ...alreadyPaused].some((id) => svc.sim.isPaused(id))).toBe(false);
  });

  it('leaves the other fields of the campaign hash alone and creates the hash when absent', async () => {
    const agentId = await db.agent(networkA);
    const [withHash, withoutHash] = await db.campaigns(agentId, 2);
    await svc.redis.hset(`campaign:${withHash}`, { budget: '100', paused: '0' });

    await post({ agentId, enabled: false });

    expect(await svc.redis.hgetall(`campaign:${withHash}`)).toEqual({ budget: '100', paused: '1' });
    expect(await svc.redis.hgetall(`campaign:${withoutHash}`)).toEqual({ paused: '1' });
  });

  it('is safe to repeat: a second disable pauses nothing and returns 0', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 4);
    expect((await post({ agentId, enabled: false })).json().pausedCampaignCount).toBe(4);
    const again = await post({ agentId, enabled: false });
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ enabled: false, pausedCampaignCount: 0 });
  });

  it('pauses 2,500 campaigns in batches of at most 100', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 2_500);
    const before = svc.sim.requests().length;

    const response = await post({ agentId, enabled: false });

    expect(response.json().pausedCampaignCount).toBe(2_500);
    const calls = svc.sim.requests().slice(before);
    expect(calls).toHaveLength(25);
    expect(Math.max(...calls.map((c) => c.campaignIds.length))).toBe(100);
    expect(new Set(calls.flatMap((c) => c.campaignIds))).toEqual(new Set(ids));
    expect(new Set(calls.map((c) => c.idempotencyKey)).size).toBe(25);
    expect((await db.pausedIds(agentId)).size).toBe(2_500);
    expect((await svc.pausedInRedis(ids)).every(Boolean)).toBe(true);
  });
});

describe('enable: agentApproved becomes true and no campaign is resumed', () => {
  it('approves the agent, returns 0 and leaves paused campaigns paused', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 3);
    await post({ agentId, enabled: false });
    const callsBefore = svc.sim.requests().length;

    const response = await post({ agentId, enabled: true });

    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ agentId, networkId: networkA, enabled: true, pausedCampaignCount: 0 });
    expect(await db.agentApproved(agentId)).toBe(true);
    expect(await db.pausedIds(agentId)).toEqual(new Set(ids));
    expect(await svc.pausedInRedis(ids)).toEqual([true, true, true]);
    expect(svc.sim.requests().length).toBe(callsBefore);
  });

  it('touches no campaign of an enabled agent', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 2);
    const response = await post({ agentId, enabled: true });
    expect(response.json().pausedCampaignCount).toBe(0);
    expect((await db.pausedIds(agentId)).size).toBe(0);
    expect(await svc.pausedInRedis(ids)).toEqual([false, false]);
  });
});

describe('authentication: an x-api-key bound to one network, checked before anything else', () => {
  it('answers 401 without a key, whatever the body', async () => {
    for (const body of [{ agentId: 'nonsense' }, 'not json', { agentId: `us-east-1:${crypto.randomUUID()}`, enabled: false }]) {
      const response = await post(body, {});
      expect(response.statusCode).toBe(401);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toMatchObject({ status: 401, title: 'Missing or unknown API key' });
    }
  });

  it('answers 401 for an unknown key, even with a body too large or of the wrong type', async () => {
    expect((await post({ agentId: 'x' }, { 'x-api-key': newApiKey() })).statusCode).toBe(401);
    const large = await injectStatusBody(svc.app, newApiKey(), { pad: 'x'.repeat(20_000) });
    expect(large.statusCode).toBe(401);
    const textual = await injectStatusBody(svc.app, newApiKey(), 'hello', { 'content-type': 'text/plain' });
    expect(textual.statusCode).toBe(401);
  });

  it('reads the key from x-api-key only: not from Authorization, not from the query string', async () => {
    const agentId = await db.agent(networkA);
    expect((await post({ agentId, enabled: false }, { authorization: `Bearer ${keyA}` })).statusCode).toBe(401);
    const viaQuery = await svc.app.inject({
      method: 'POST',
      url: `${statusPath}?x-api-key=${keyA}&api_key=${keyA}`,
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ agentId, enabled: false }),
    });
    expect(viaQuery.statusCode).toBe(401);
    expect(await db.agentApproved(agentId)).toBe(true);
  });

  it('takes the network from the key, never from the request', async () => {
    const agentId = await db.agent(networkA);
    const response = await post({ agentId, enabled: false, networkId: networkB });
    expect(response.statusCode).toBe(400);
    const ok = await post({ agentId, enabled: true });
    expect(ok.json().networkId).toBe(networkA);
  });
});

describe("an agent outside the key's network is a 404, indistinguishable from one that exists nowhere", () => {
  it('answers 404 for an agent of another network and changes nothing there', async () => {
    const foreign = await db.agent(networkB);
    const ids = await db.campaigns(foreign, 2);

    const response = await post({ agentId: foreign, enabled: false });

    expect(response.statusCode).toBe(404);
    expect(await db.agentApproved(foreign)).toBe(true);
    expect((await db.pausedIds(foreign)).size).toBe(0);
    expect(await svc.pausedInRedis(ids)).toEqual([false, false]);
    expect(ids.some((id) => svc.sim.isPaused(id))).toBe(false);
  });

  it('gives byte-for-byte the same 404 as for an agent that does not exist, apart from the request id', async () => {
    const foreign = await db.agent(networkB);
    const nowhere = `us-east-1:${crypto.randomUUID()}`;
    const a = await post({ agentId: foreign, enabled: true }, { 'x-api-key': keyA, 'x-request-id': 'same-id' });
    const b = await post({ agentId: nowhere, enabled: true }, { 'x-api-key': keyA, 'x-request-id': 'same-id' });
    expect(a.statusCode).toBe(404);
    expect(a.body).toBe(b.body);
    const headers = (r: typeof a) => Object.entries(r.headers).filter(([name]) => name !== 'date');
    expect(headers(a)).toEqual(headers(b));
    expect(await db.agentApproved(foreign)).toBe(true);
  });
});

describe('validation: a strict body, 400/413/415 as problem+json, nothing changed', () => {
  const cases: Array<[string, unknown, RegExp]> = [
    [
      'an unknown property',
      { agentId: 'us-east-1:00000000-0000-4000-8000-000000000000', enabled: false, extra: 1 },
      /unknown property "extra"/,
    ],
    [
      'enabled as a string',
      { agentId: 'us-east-1:00000000-0000-4000-8000-000000000000', enabled: 'false' },
      /enabled must be of type boolean/,
    ],
    ['enabled as a number', { agentId: 'us-east-1:00000000-0000-4000-8000-000000000000', enabled: 0 }, /enabled must be of type boolean/],
    ['a malformed agentId', { agentId: 'eu-west-1:00000000-0000-4000-8000-000000000000', enabled: false }, /agentId must have the form/],
    ['an agentId without uuid', { agentId: 'us-east-1:abc', enabled: false }, /agentId must have the form/],
    ['a missing agentId', { enabled: false }, /agentId is required/],
    ['a missing enabled', { agentId: 'us-east-1:00000000-0000-4000-8000-000000000000' }, /enabled is required/],
    ['an array body', [], /body must be a JSON object/],
    ['a string body', '"text"', /body must be a JSON object/],
    ['null', 'null', /body must be a JSON object/],
    ['malformed JSON', '{"agentId": ', /not valid JSON/],
  ];
  for (const [name, body, detail] of cases) {
    it(`answers 400 for ${name}`, async () => {
      const response = await post(body);
      expect(response.statusCode).toBe(400);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      const problem = response.json();
      expect(problem).toMatchObject({ status: 400, type: expect.stringMatching(/^urn:/), title: expect.any(String) });
      expect(problem.detail).toMatch(detail);
    });
  }

  it('answers 400 for an empty body', async () => {
    const response = await svc.app.inject({
      method: 'POST',
      url: statusPath,
      headers: { 'x-api-key': keyA, 'content-type': 'application/json' },
    });
    expect(response.statusCode).toBe(400);
  });

  it('answers 415 for a body that is not JSON', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const response = await injectStatusBody(svc.app, keyA, 'agentId=x', { 'content-type': type });
      expect(response.statusCode).toBe(415);
      expect(response.json()).toMatchObject({ status: 415 });
    }
  });

  it('accepts JSON with a charset', async () => {
    const agentId = await db.agent(networkA);
    const response = await post({ agentId, enabled: true }, { 'x-api-key': keyA, 'content-type': 'application/json; charset=utf-8' });
    expect(response.statusCode).toBe(200);
  });

  it('answers 413 for a body over 16 KiB, and accepts one just under', async () => {
    const agentId = await db.agent(networkA);
    const big = await post({ agentId, enabled: false, pad: 'x'.repeat(16 * 1024) });
    expect(big.statusCode).toBe(413);
    expect(big.json()).toMatchObject({ status: 413 });
    expect(await db.agentApproved(agentId)).toBe(true);
  });

  it('changes nothing on a rejected body', async () => {
    const agentId = await db.agent(networkA);
    await post({ agentId, enabled: false, extra: true });
    await post({ agentId, enabled: 'false' });
    expect(await db.agentApproved(agentId)).toBe(true);
  });
});

describe('every response carries x-request-id', () => {
  it('echoes a sane caller id and generates one otherwise', async () => {
    const echoed = await post({}, { 'x-api-key': keyA, 'x-request-id': 'abc-123' });
    expect(echoed.headers['x-request-id']).toBe('abc-123');
    expect(echoed.json().requestId).toBe('abc-123');
    const generated = await post({}, { 'x-api-key': keyA, 'x-request-id': 'bad id with spaces\u0007' });
    expect(generated.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    const none = await svc.app.inject({ method: 'GET', url: '/livez' });
    expect(none.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('tells nothing about the key set: a loaded key and a string of its shape both get a fresh id, the same answer and a count', async () => {
    const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
    const lookalike = `pas_${Array.from({ length: 38 }, () => base62[Math.floor(Math.random() * 62)]).join('')}`;
    const counted = async () =>
      (await svc.service.metrics.registry.getSingleMetricAsString('suspicious_requests_total')).match(
        /suspicious_requests_total\{reason="key_shaped_request_id"\} (\d+)/,
      )?.[1];
    const before = Number(await counted());
    /** An answer as a caller without a key sees it, with what differs between any two requests taken out. */
    const seen = async (requestId: string, request: { method: 'GET' | 'POST'; url: string; payload?: string }) => {
      const response = await svc.app.inject({ ...request, headers: { 'content-type': 'application/json', 'x-request-id': requestId } });
      const { 'x-request-id': id, date: _date, ...headers } = response.headers;
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      expect(id).not.toBe(requestId);
      return { status: response.statusCode, headers, body: response.body.replaceAll(String(id), '<id>') };
    };
    for (const request of [
      { method: 'GET' as const, url: '/livez' },
      { method: 'GET' as const, url: '/partner/agents/us-east-1:00000000-0000-4000-8000-000000000000/status' },
      { method: 'POST' as const, url: statusPath, payload: '{}' },
    ]) {
      const withKey = await seen(keyA, request);
      const withLookalike = await seen(lookalike, request);
      expect(withLookalike).toEqual(withKey);
      expect(withKey.body).not.toContain(keyA);
    }
    expect(Number(await counted())).toBe(before + 6);
    const lines = svc.logs.lines.join('\n');
    expect(lines).not.toContain(lookalike);
    expect(lines).not.toContain(keyA);
  });

  it('answers unknown routes with a problem 404', async () => {
    const response = await svc.app.inject({ method: 'GET', url: '/partner/nothing' });
    expect(response.statusCode).toBe(404);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  });
});

describe('probes', () => {
  it('answers /livez and /readyz with 200 when keys are loaded and the database answers', async () => {
    expect((await svc.app.inject({ method: 'GET', url: '/livez' })).statusCode).toBe(200);
    expect((await svc.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('turns /readyz to 503 while draining, still serving requests', async () => {
    const other = await startTestService({ partners: [{ key: newApiKey(), networkId: networkA, name: 'drain' }] });
    try {
      other.service.startDraining();
      expect((await other.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
      expect((await other.app.inject({ method: 'GET', url: '/livez' })).statusCode).toBe(200);
    } finally {
      await other.close();
    }
  });
});
