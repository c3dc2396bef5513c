import { randomUUID } from 'node:crypto';
import LinkHeader from 'http-link-header';
import { parseItem } from 'structured-headers';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { injectStatusBody, statusPath, urls } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';
import { waitFor } from '../support/wait.js';

// docs/interfaces.md §15 against the real PostgreSQL and Redis: a request's version (header, the
// key's pinned version, the default), the 400 for an unknown or sunset one in the contract's order,
// the 202 that 2026-12-01 gives a recorded but unfinished disable, the deprecation headers, and
// Idempotency-Key replays in the first request's version.

const db = testDatabase();
let svc: TestService;
let sunsetSvc: TestService;
let networkA: string;
let networkSunset: string;
const key = newApiKey();
const pinnedKey = newApiKey();
const sunsetKey = newApiKey();

/** 2026-11-21 deprecated in `svc`, its sunset ahead. */
const deprecatedAt = '2026-11-26T00:00:00Z';
const sunsetAt = '2027-11-26T00:00:00Z';
const link = 'https://partners.example.com/guide#api-versions';

const rateLimitMax = 3;

beforeAll(async () => {
  networkA = await db.network();
  networkSunset = await db.network();
  svc = await startTestService({
    partners: [
      { key, networkId: networkA, name: 'versions-a' },
      { key: pinnedKey, networkId: networkA, name: 'versions-pinned', apiVersion: '2026-12-01' },
    ],
    env: {
      API_VERSION_DEPRECATIONS: JSON.stringify({ '2026-11-21': { deprecatedAt, sunsetAt, link } }),
      // A disable left to the worker finishes soon after spend management answers again.
      WORKER_POLL_INTERVAL_MS: '200',
      WORKER_BACKOFF_BASE_MS: '100',
      WORKER_BACKOFF_MAX_MS: '500',
      BREAKER_RESET_TIMEOUT_MS: '500',
    },
  });
  sunsetSvc = await startTestService({
    partners: [{ key: sunsetKey, networkId: networkSunset, name: 'versions-sunset', apiVersion: '2026-11-21' }],
    env: {
      API_VERSION_DEPRECATIONS: JSON.stringify({
        '2026-11-21': { deprecatedAt: '2026-01-01T00:00:00Z', sunsetAt: '2026-06-01T00:00:00Z', link },
      }),
      RATE_LIMIT_MAX: String(rateLimitMax),
      RATE_LIMIT_WINDOW_MS: '60000',
    },
  });
});

afterEach(() => {
  svc.sim.setMode('ok');
  svc.sim.refuse([]);
});

afterAll(async () => {
  const closed = await Promise.allSettled([svc?.close(), sunsetSvc?.close()]);
  await db.close();
  for (const result of closed) if (result.status === 'rejected') throw result.reason;
});

type Headers = Record<string, string>;

function post(service: TestService, apiKey: string, body: unknown, headers: Headers = {}) {
  return injectStatusBody(service.app, apiKey, body, headers);
}

function get(service: TestService, apiKey: string, url: string, headers: Headers = {}) {
  return service.app.inject({ method: 'GET', url, headers: { 'x-api-key': apiKey, ...headers } });
}

/** Each partner route, as a request that succeeds for an agent of the key's network. */
function routes(agentId: string): Array<[string, (headers: Headers, apiKey?: string) => ReturnType<typeof post>]> {
  return [
    ['POST /partner/agents/status', (headers, apiKey = key) => post(svc, apiKey, { agentId, enabled: true }, headers)],
    ['GET /partner/agents/{agentId}/status', (headers, apiKey = key) => get(svc, apiKey, urls.agentStatus(agentId), headers)],
    ['GET /partner/agents/{agentId}/status-changes', (headers, apiKey = key) => get(svc, apiKey, urls.statusChanges(agentId), headers)],
  ];
}

function expectUnsupported(response: Awaited<ReturnType<typeof post>>, supported: string[]) {
  expect(response.statusCode).toBe(400);
  expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(response.json()).toMatchObject({
    type: 'urn:partner-agent-status:problem:unsupported-api-version',
    status: 400,
    supportedVersions: supported,
  });
  expect(response.json().detail).toContain(supported.join(', '));
  expect(response.headers['partner-api-version']).toBeUndefined();
}

describe('the version a request is answered in', () => {
  it('is 2026-11-21 on every route when the request names none and its key pins none', async () => {
    const agentId = await db.agent(networkA);
    for (const [route, send] of routes(agentId)) {
      const response = await send({});
      expect(response.statusCode, route).toBe(200);
      expect(response.headers['partner-api-version'], route).toBe('2026-11-21');
    }
  });

  it('is the version named in Partner-Api-Version, on every route, for each supported version', async () => {
    const agentId = await db.agent(networkA);
    for (const version of ['2026-11-21', '2026-12-01']) {
      for (const [route, send] of routes(agentId)) {
        const response = await send({ 'partner-api-version': version });
        expect(response.statusCode, route).toBe(200);
        expect(response.headers['partner-api-version'], `${route} ${version}`).toBe(version);
      }
    }
  });

  it("is the key's pinned version when the request names none, and the named one when it does", async () => {
    const agentId = await db.agent(networkA);
    for (const [route, send] of routes(agentId)) {
      expect((await send({}, pinnedKey)).headers['partner-api-version'], route).toBe('2026-12-01');
      expect((await send({ 'partner-api-version': '2026-11-21' }, pinnedKey)).headers['partner-api-version'], route).toBe('2026-11-21');
    }
  });

  it('is on the answers after authentication that are not a success too (404, validation 400)', async () => {
    const elsewhere = `us-east-1:${randomUUID()}`;
    const notFound = await post(svc, key, { agentId: elsewhere, enabled: false }, { 'partner-api-version': '2026-12-01' });
    expect(notFound.statusCode).toBe(404);
    expect(notFound.headers['partner-api-version']).toBe('2026-12-01');
    const invalid = await post(svc, key, { agentId: 'nope', enabled: false });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json().type).toBe('urn:partner-agent-status:problem:validation');
    expect(invalid.headers['partner-api-version']).toBe('2026-11-21');
  });

  it('is written in the access line and counted by partner and version', async () => {
    const agentId = await db.agent(networkA);
    const response = await get(svc, pinnedKey, urls.agentStatus(agentId));
    const line = await waitFor(
      () =>
        svc.logs.records().find((record) => record.msg === 'request completed' && record.requestId === response.headers['x-request-id']),
      { timeoutMs: 2_000, intervalMs: 20, failure: 'no access line' },
    );
    expect(line).toMatchObject({ apiVersion: '2026-12-01', partner: 'versions-pinned' });
    const metric = await svc.service.metrics.registry.getSingleMetricAsString('partner_api_version_answers_total');
    expect(metric).toMatch(/partner_api_version_answers_total\{partner="versions-pinned",api_version="2026-12-01"\} [1-9]/);
  });
});

describe('an unknown version', () => {
  for (const value of ['2026-11-22', '2026-12-1', '2026-12-01T00:00:00Z', 'latest', '2026-11-21, 2026-12-01', '']) {
    it(`answers 400 listing the supported versions and changes nothing: ${JSON.stringify(value)}`, async () => {
      const agentId = await db.agent(networkA);
      const before = await db.changeCount(agentId);
      expectUnsupported(await post(svc, key, { agentId, enabled: false }, { 'partner-api-version': value }), ['2026-11-21', '2026-12-01']);
      expect(await db.changeCount(agentId)).toBe(before);
      expect(await db.agentApproved(agentId)).toBe(true);
      expectUnsupported(await get(svc, key, urls.agentStatus(agentId), { 'partner-api-version': value }), ['2026-11-21', '2026-12-01']);
    });
  }

  it('is refused before validation: an invalid body with an unknown version gets the version 400', async () => {
    const response = await post(svc, key, { agentId: 'nope', unknown: 1 }, { 'partner-api-version': '2027-01-01' });
    expectUnsupported(response, ['2026-11-21', '2026-12-01']);
  });

  it('is refused after authentication: a bad key gets the 401, without a version', async () => {
    const response = await post(svc, newApiKey(), { agentId: 'nope', enabled: true }, { 'partner-api-version': '2027-01-01' });
    expect(response.statusCode).toBe(401);
    expect(response.headers['partner-api-version']).toBeUndefined();
    const none = await post(svc, newApiKey(), { agentId: 'nope', enabled: true }, { 'partner-api-version': '2026-12-01' });
    expect(none.statusCode).toBe(401);
    expect(none.headers['partner-api-version']).toBeUndefined();
  });
});

describe('a version past its sunset', () => {
  it("answers 400 listing only the versions still served, also when it is the key's pinned version; a supported one works", async () => {
    const agentId = await db.agent(networkSunset);
    const pinned = await post(sunsetSvc, sunsetKey, { agentId, enabled: false });
    expectUnsupported(pinned, ['2026-12-01']);
    expect(pinned.json().detail).toContain('The version your key is pinned to (2026-11-21) is no longer served.');
    expectUnsupported(await post(sunsetSvc, sunsetKey, { agentId, enabled: false }, { 'partner-api-version': '2026-11-21' }), [
      '2026-12-01',
    ]);
    expect(await db.changeCount(agentId)).toBe(0);
    const served = await post(sunsetSvc, sunsetKey, { agentId, enabled: true }, { 'partner-api-version': '2026-12-01' });
    expect(served.statusCode).toBe(200);
    expect(served.headers['partner-api-version']).toBe('2026-12-01');
  });

  it('comes after the rate limit: over the limit, an unsupported version gets the 429', async () => {
    const agentId = await db.agent(networkSunset);
    for (let i = 0; i < rateLimitMax + 1; i += 1) {
      await get(sunsetSvc, sunsetKey, urls.agentStatus(agentId), { 'partner-api-version': '2026-12-01' });
    }
    const known = await get(sunsetSvc, sunsetKey, urls.agentStatus(agentId), { 'partner-api-version': '2026-12-01' });
    expect(known.statusCode).toBe(429);
    expect(known.headers['partner-api-version']).toBe('2026-12-01');
    const unknown = await post(sunsetSvc, sunsetKey, { agentId, enabled: false }, { 'partner-api-version': '2099-01-01' });
    expect(unknown.statusCode).toBe(429);
    expect(unknown.headers['partner-api-version']).toBeUndefined();
    expect(await db.changeCount(agentId)).toBe(0);
  });
});

describe('a disable that is recorded but not finished by its answer (spend management failing)', () => {
  it('answers 500 with the counts under 2026-11-21, as before versions existed', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 3);
    svc.sim.setMode('fail');
    const response = await post(svc, key, { agentId, enabled: false }, { 'partner-api-version': '2026-11-21' });
    expect(response.statusCode).toBe(500);
    expect(response.headers['partner-api-version']).toBe('2026-11-21');
    expect(response.json()).toMatchObject({
      type: 'urn:partner-agent-status:problem:dependency-failure',
      pausedCampaignCount: 0,
      remainingCampaignCount: 3,
    });
    svc.sim.setMode('ok');
    await waitFor(async () => !(await db.pendingRow(agentId)), {
      timeoutMs: 60_000,
      intervalMs: 100,
      failure: 'the disable did not complete',
    });
  });

  it('answers 202 with Location and the status under 2026-12-01, and completes by itself', async () => {
    const agentId = await db.agent(networkA);
    const campaigns = await db.campaigns(agentId, 3);
    svc.sim.setMode('fail');
    const response = await post(svc, key, { agentId, enabled: false }, { 'partner-api-version': '2026-12-01' });
    expect(response.statusCode).toBe(202);
    expect(response.headers['partner-api-version']).toBe('2026-12-01');
    expect(response.headers.location).toBe(urls.agentStatus(agentId));
    expect(response.headers['preference-applied']).toBeUndefined();
    expect(response.headers['content-type']).toMatch(/^application\/json/);
    expect(response.json()).toEqual({
      agentId,
      networkId: networkA,
      enabled: false,
      activeUnpausedCampaignCount: 3,
      disableInProgress: true,
    });
    expect(await db.agentApproved(agentId)).toBe(false);
    expect(await db.pendingRow(agentId)).toBe(true);

    const status = await get(svc, key, response.headers.location as string, { 'partner-api-version': '2026-12-01' });
    expect(status.json()).toMatchObject({ enabled: false, disableInProgress: true });

    // No further request: the worker finishes once spend management answers again.
    svc.sim.setMode('ok');
    await waitFor(async () => !(await db.pendingRow(agentId)), {
      timeoutMs: 60_000,
      intervalMs: 100,
      failure: 'the disable did not complete',
    });
    expect((await db.pausedIds(agentId)).size).toBe(campaigns.length);
    expect(await svc.pausedInRedis(campaigns)).toEqual([true, true, true]);
  });

  it('answers 202 for a key pinned to 2026-12-01 that names no version (a campaign spend management leaves out)', async () => {
    const agentId = await db.agent(networkA);
    const campaigns = await db.campaigns(agentId, 2);
    svc.sim.refuse(campaigns.slice(0, 1));
    const response = await post(svc, pinnedKey, { agentId, enabled: false });
    expect(response.statusCode).toBe(202);
    expect(response.json()).toMatchObject({ enabled: false, activeUnpausedCampaignCount: 1, disableInProgress: true });
    svc.sim.refuse([]);
    await waitFor(async () => !(await db.pendingRow(agentId)), {
      timeoutMs: 60_000,
      intervalMs: 100,
      failure: 'the disable did not complete',
    });
  });
});

describe('a deprecated version', () => {
  it('answers with Deprecation (RFC 9745), Sunset (RFC 8594) and Link rel="deprecation"', async () => {
    const agentId = await db.agent(networkA);
    const response = await get(svc, key, urls.agentStatus(agentId), { 'partner-api-version': '2026-11-21' });
    expect(response.statusCode).toBe(200);
    const [deprecation, parameters] = parseItem(String(response.headers.deprecation));
    expect(deprecation).toBeInstanceOf(Date);
    expect(deprecation).toEqual(new Date(deprecatedAt));
    expect(parameters.size).toBe(0);
    const sunset = String(response.headers.sunset);
    // An IMF-fixdate (RFC 9110 §5.6.7) is exactly what toUTCString writes for the same moment.
    expect(new Date(sunset).toUTCString()).toBe(sunset);
    expect(new Date(sunset)).toEqual(new Date(sunsetAt));
    expect(Date.parse(sunset)).toBeGreaterThanOrEqual((deprecation as Date).getTime());
    const links = LinkHeader.parse(String(response.headers.link)).rel('deprecation');
    expect(links.map((l) => l.uri)).toEqual([link]);
  });

  it('still works, on every route, and a version that is not deprecated carries none of the three', async () => {
    const agentId = await db.agent(networkA);
    for (const [route, send] of routes(agentId)) {
      const old = await send({});
      expect(old.statusCode, route).toBe(200);
      expect(old.headers.deprecation, route).toBeDefined();
      const current = await send({ 'partner-api-version': '2026-12-01' });
      expect(current.statusCode, route).toBe(200);
      for (const header of ['deprecation', 'sunset', 'link']) expect(current.headers[header], `${route} ${header}`).toBeUndefined();
    }
  });
});

describe('an Idempotency-Key replay', () => {
  it('answers in the version of the first request, whatever version the repeat names', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 2);
    const idempotencyKey = randomUUID();
    svc.sim.setMode('fail');
    const first = await post(
      svc,
      key,
      { agentId, enabled: false },
      { 'partner-api-version': '2026-12-01', 'idempotency-key': idempotencyKey },
    );
    expect(first.statusCode).toBe(202);
    const changes = await db.changeCount(agentId);

    const repeat = await post(
      svc,
      key,
      { agentId, enabled: false },
      { 'partner-api-version': '2026-11-21', 'idempotency-key': idempotencyKey },
    );
    expect(repeat.statusCode).toBe(202);
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(repeat.headers['partner-api-version']).toBe('2026-12-01');
    // The deprecation of the version the repeat named does not apply: the answer is 2026-12-01's.
    expect(repeat.headers.deprecation).toBeUndefined();
    expect(repeat.json()).toEqual(first.json());
    expect(await db.changeCount(agentId)).toBe(changes);
    svc.sim.setMode('ok');
    await waitFor(async () => !(await db.pendingRow(agentId)), {
      timeoutMs: 60_000,
      intervalMs: 100,
      failure: 'the disable did not complete',
    });
  });

  it("carries the first request's deprecation when that version is the deprecated one", async () => {
    const agentId = await db.agent(networkA);
    const idempotencyKey = randomUUID();
    const first = await post(svc, key, { agentId, enabled: true }, { 'idempotency-key': idempotencyKey });
    expect(first.headers['partner-api-version']).toBe('2026-11-21');
    const repeat = await post(
      svc,
      key,
      { agentId, enabled: true },
      { 'partner-api-version': '2026-12-01', 'idempotency-key': idempotencyKey },
    );
    expect(repeat.headers['idempotent-replayed']).toBe('true');
    expect(repeat.headers['partner-api-version']).toBe('2026-11-21');
    expect(repeat.headers.deprecation).toBe(first.headers.deprecation);
  });
});

describe('the OpenAPI document of each version', () => {
  it('is served with ?version=, the deprecated one marked deprecated; an unknown version is a 400', async () => {
    const old = await svc.app.inject({ method: 'GET', url: `${urls.openApi}?version=2026-11-21` });
    expect(old.statusCode).toBe(200);
    const document = old.json();
    expect(document.info.version).toBe('2026-11-21');
    expect(document.paths[statusPath].post.deprecated).toBe(true);
    expect(document.components.parameters.PartnerApiVersion.schema.enum).toEqual(['2026-11-21', '2026-12-01']);
    const newest = (await svc.app.inject({ method: 'GET', url: urls.openApi })).json();
    expect(newest.info.version).toBe('2026-12-01');
    expect(newest.paths[statusPath].post.deprecated).toBeUndefined();
    const unknown = await svc.app.inject({ method: 'GET', url: `${urls.openApi}?version=2026-11-22` });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json()).toMatchObject({ supportedVersions: ['2026-11-21', '2026-12-01'] });
  });
});
