// docs/interfaces.md §15: dated API versions in Partner-Api-Version, against any BASE_URL. A request
// naming no version is answered in 2026-11-21 (the partners here pin none); each supported version
// is echoed on every partner route; an unknown one is a 400 listing the supported versions, after
// the 401, and changes nothing. Whatever the deployment deprecates, a deprecated version's answers
// carry Deprecation, Sunset and Link in the RFCs' formats. The 202 of 2026-12-01 needs spend
// management to fail: api-versions.serial.spec.ts.
import type { APIRequestContext } from '@playwright/test';
import LinkHeader from 'http-link-header';
import { parseItem } from 'structured-headers';
import { expect, expectProblem, mediaType, type Partner, test } from '../support/fixtures.js';

const versions = ['2026-11-21', '2026-12-01'];

/** Each partner route as a request that succeeds for an agent of the partner's network. */
function routes(request: APIRequestContext, partner: Partner, agentId: string) {
  const headersWith = (more: Record<string, string>) => ({ 'x-api-key': partner.key, ...more });
  return [
    [
      'POST /partner/agents/status',
      (more: Record<string, string>) =>
        request.post('/partner/agents/status', {
          headers: headersWith({ 'content-type': 'application/json', ...more }),
          data: Buffer.from(JSON.stringify({ agentId, enabled: true })),
          failOnStatusCode: false,
        }),
    ],
    [
      'GET /partner/agents/{agentId}/status',
      (more: Record<string, string>) =>
        request.get(`/partner/agents/${agentId}/status`, { headers: headersWith(more), failOnStatusCode: false }),
    ],
    [
      'GET /partner/agents/{agentId}/status-changes',
      (more: Record<string, string>) =>
        request.get(`/partner/agents/${agentId}/status-changes`, { headers: headersWith(more), failOnStatusCode: false }),
    ],
  ] as const;
}

test.describe('The version a request is answered in', () => {
  test('is 2026-11-21 on every route when the request names none', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open);
    for (const [route, send] of routes(request, partners.open, agent.agentId)) {
      const response = await send({});
      expect(response.status(), route).toBe(200);
      expect(response.headers()['partner-api-version'], route).toBe('2026-11-21');
    }
  });

  test('is the one named in Partner-Api-Version, for each supported version, on every route', async ({ request, given, partners }) => {
    const agent = await given.agent(partners.open);
    for (const version of versions) {
      for (const [route, send] of routes(request, partners.open, agent.agentId)) {
        const response = await send({ 'partner-api-version': version });
        expect(response.status(), `${route} ${version}`).toBe(200);
        expect(response.headers()['partner-api-version'], `${route} ${version}`).toBe(version);
      }
    }
  });
});

test.describe('An unknown version', () => {
  for (const value of ['2026-11-22', '2026-12-1', 'latest']) {
    test(`${value}: 400 listing the supported versions, without Partner-Api-Version, and nothing changes`, async ({
      api,
      request,
      given,
      partners,
    }) => {
      const agent = await given.agent(partners.open, { campaigns: { unpaused: 1 } });
      const response = await api.setStatus(
        partners.open,
        { agentId: agent.agentId, enabled: false },
        { headers: { 'partner-api-version': value } },
      );
      const problem = await expectProblem(response, 400, 'unsupported-api-version');
      expect(problem.supportedVersions).toEqual(expect.arrayContaining(['2026-12-01']));
      expect(response.headers()['partner-api-version']).toBeUndefined();
      const status = await request.get(`/partner/agents/${agent.agentId}/status`, { headers: { 'x-api-key': partners.open.key } });
      expect(await status.json()).toMatchObject({ enabled: true, activeUnpausedCampaignCount: 1, disableInProgress: false });
    });
  }

  test('comes after authentication: a bad key gets the 401, without a version', async ({ api }) => {
    const response = await api.setStatus(
      { key: 'not-a-key-0123456789abcdef' },
      { agentId: 'x', enabled: true },
      { headers: { 'partner-api-version': '1999-01-01' } },
    );
    await expectProblem(response, 401, 'unauthorized');
    expect(response.headers()['partner-api-version']).toBeUndefined();
  });
});

test.describe('A deprecated version (whatever this deployment deprecates)', () => {
  test('answers with Deprecation as a structured-field Date, Sunset as an HTTP-date not before it, and a deprecation Link', async ({
    request,
    given,
    partners,
  }) => {
    const agent = await given.agent(partners.open);
    for (const version of versions) {
      const response = await request.get(`/partner/agents/${agent.agentId}/status`, {
        headers: { 'x-api-key': partners.open.key, 'partner-api-version': version },
      });
      const headers = response.headers();
      if (headers.deprecation === undefined) {
        // Not deprecated here: none of the three (the newest version can never be deprecated).
        expect(headers.sunset, version).toBeUndefined();
        expect(headers.link, version).toBeUndefined();
        continue;
      }
      expect(version, 'the newest version is never deprecated').not.toBe('2026-12-01');
      const [when] = parseItem(headers.deprecation);
      expect(when, version).toBeInstanceOf(Date);
      if (headers.sunset !== undefined) {
        expect(new Date(headers.sunset).toUTCString()).toBe(headers.sunset);
        expect(Date.parse(headers.sunset)).toBeGreaterThanOrEqual((when as Date).getTime());
      }
      expect(LinkHeader.parse(headers.link ?? '').rel('deprecation').length, version).toBe(1);
    }
  });
});

test.describe('The OpenAPI document of each version', () => {
  test('is served at /partner/openapi.json?version=, the newest without it; an unknown version is a 400', async ({ request }) => {
    for (const version of versions) {
      const response = await request.get(`/partner/openapi.json?version=${version}`);
      expect(response.status()).toBe(200);
      expect(mediaType(response)).toBe('application/json');
      const document = await response.json();
      expect(document.info.version).toBe(version);
      expect(document.components.parameters.PartnerApiVersion.schema.enum).toEqual(versions);
    }
    expect((await (await request.get('/partner/openapi.json')).json()).info.version).toBe('2026-12-01');
    await expectProblem(
      await request.get('/partner/openapi.json?version=2026-11-22', { failOnStatusCode: false }),
      400,
      'unsupported-api-version',
    );
  });
});
