// docs/interfaces.md §14, partner webhooks: the endpoint routes of a network, against any BASE_URL.
// Registration takes https URLs of public addresses only; the URL here (E2E_WEBHOOK_URL, default a
// public address literal, so no DNS is needed) is registered and deleted within each test, and is
// subscribed to no event the run makes where the test allows it.
import { randomUUID } from 'node:crypto';
import type { APIRequestContext, APIResponse } from '@playwright/test';
import { expect, expectProblem, mediaType, type Partner, test } from '../support/fixtures.js';

const hookUrl = process.env.E2E_WEBHOOK_URL?.trim() || 'https://8.8.8.8/partner-agent-status-e2e';

interface Endpoint {
  id: string;
  url: string;
  eventTypes: string[];
  status: string;
  createdAt: string;
  secret?: string;
}

function call(request: APIRequestContext, partner: Partner | { key: string | null }, method: string, path: string, body?: unknown) {
  return request.fetch(path, {
    method,
    headers: {
      ...(partner.key === null ? {} : { 'x-api-key': partner.key }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { data: JSON.stringify(body) }),
    failOnStatusCode: false,
  });
}

async function created(response: APIResponse): Promise<Endpoint> {
  expect(response.status(), await response.text()).toBe(201);
  expect(mediaType(response)).toBe('application/json');
  return (await response.json()) as Endpoint;
}

/** Registers an endpoint for the test and deletes it afterwards, whatever the test did. */
async function withEndpoint(
  request: APIRequestContext,
  partner: Partner,
  body: Record<string, unknown>,
  use: (endpoint: Endpoint) => Promise<void>,
): Promise<void> {
  const endpoint = await created(await call(request, partner, 'POST', '/partner/webhook-endpoints', body));
  try {
    await use(endpoint);
  } finally {
    await call(request, partner, 'DELETE', `/partner/webhook-endpoints/${endpoint.id}`);
  }
}

test.describe('webhook endpoints of a network', () => {
  test('create shows the signing secret once; list shows the endpoint without it; delete removes it', async ({ request, partners }) => {
    let id = '';
    await withEndpoint(request, partners.open, { url: hookUrl, eventTypes: ['agent.enabled'] }, async (endpoint) => {
      id = endpoint.id;
      expect(endpoint).toMatchObject({ url: hookUrl, eventTypes: ['agent.enabled'], status: 'enabled' });
      expect(endpoint.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
      const listed = await call(request, partners.open, 'GET', '/partner/webhook-endpoints');
      expect(listed.status()).toBe(200);
      const { endpoints } = (await listed.json()) as { endpoints: Endpoint[] };
      const mine = endpoints.find((e) => e.id === endpoint.id);
      expect(mine).toEqual({
        id: endpoint.id,
        url: hookUrl,
        eventTypes: ['agent.enabled'],
        status: 'enabled',
        createdAt: endpoint.createdAt,
      });
      expect(await listed.text()).not.toContain(endpoint.secret!.slice(6));
      const deleted = await call(request, partners.open, 'DELETE', `/partner/webhook-endpoints/${endpoint.id}`);
      expect(deleted.status()).toBe(204);
    });
    const listed = (await (await call(request, partners.open, 'GET', '/partner/webhook-endpoints')).json()) as { endpoints: Endpoint[] };
    expect(listed.endpoints.map((e) => e.id)).not.toContain(id);
  });

  test('every event type when none is named', async ({ request, partners }) => {
    await withEndpoint(request, partners.open, { url: hookUrl }, async (endpoint) => {
      expect(endpoint.eventTypes).toEqual(['agent.disabled', 'agent.enabled', 'agent.disable.completed']);
    });
  });

  test('rotating the secret answers a new one and until when the old one signs', async ({ request, partners }) => {
    await withEndpoint(request, partners.open, { url: hookUrl, eventTypes: ['agent.enabled'] }, async (endpoint) => {
      const rotated = await call(request, partners.open, 'POST', `/partner/webhook-endpoints/${endpoint.id}/rotate-secret`);
      expect(rotated.status(), await rotated.text()).toBe(200);
      const body = (await rotated.json()) as { secret: string; previousSecretExpiresAt: string };
      expect(body.secret).toMatch(/^whsec_/);
      expect(body.secret).not.toBe(endpoint.secret);
      const hours = (Date.parse(body.previousSecretExpiresAt) - Date.now()) / 3_600_000;
      expect(hours).toBeGreaterThan(23);
      expect(hours).toBeLessThanOrEqual(24.1);
    });
  });

  test('a new endpoint has no deliveries; retrying an unknown delivery is a 404', async ({ request, partners }) => {
    await withEndpoint(request, partners.open, { url: hookUrl, eventTypes: ['agent.enabled'] }, async (endpoint) => {
      const history = await call(request, partners.open, 'GET', `/partner/webhook-endpoints/${endpoint.id}/deliveries`);
      expect(history.status()).toBe(200);
      expect(await history.json()).toEqual({ deliveries: [] });
      await expectProblem(
        await call(request, partners.open, 'POST', `/partner/webhook-endpoints/${endpoint.id}/deliveries/${randomUUID()}/retry`),
        404,
        'not-found',
      );
    });
  });
});

test.describe('registration refuses what could turn the sender against the platform', () => {
  for (const url of [
    'http://8.8.8.8/hook',
    'https://127.0.0.1/hook',
    'https://[::1]/hook',
    'https://169.254.169.254/latest/meta-data/',
    'https://[fd00:ec2::254]/',
    'https://10.0.0.1/',
    'https://2130706433/',
    'https://localhost/',
  ]) {
    test(`${url} is a 400`, async ({ request, partners }) => {
      await expectProblem(await call(request, partners.open, 'POST', '/partner/webhook-endpoints', { url }), 400, 'validation');
    });
  }

  test('an unknown event type or property is a 400', async ({ request, partners }) => {
    await expectProblem(
      await call(request, partners.open, 'POST', '/partner/webhook-endpoints', { url: hookUrl, eventTypes: ['agent.deleted'] }),
      400,
      'validation',
    );
    await expectProblem(
      await call(request, partners.open, 'POST', '/partner/webhook-endpoints', { url: hookUrl, secret: 'mine' }),
      400,
      'validation',
    );
  });
});

test.describe("another network's endpoint", () => {
  test('answers the same 404 as an endpoint that does not exist, on every route, and is never listed', async ({ request, partners }) => {
    await withEndpoint(request, partners.open, { url: hookUrl, eventTypes: ['agent.enabled'] }, async (endpoint) => {
      const paths = (id: string): Array<[string, string]> => [
        ['DELETE', `/partner/webhook-endpoints/${id}`],
        ['POST', `/partner/webhook-endpoints/${id}/rotate-secret`],
        ['GET', `/partner/webhook-endpoints/${id}/deliveries`],
        ['POST', `/partner/webhook-endpoints/${id}/deliveries/${randomUUID()}/retry`],
      ];
      const nowhere = randomUUID();
      for (const [index, [method, path]] of paths(endpoint.id).entries()) {
        const other = await expectProblem(await call(request, partners.other, method, path), 404, 'not-found');
        const missing = await expectProblem(await call(request, partners.other, method, paths(nowhere)[index]![1]), 404, 'not-found');
        expect({ ...other, requestId: '' }).toEqual({ ...missing, requestId: '' });
      }
      const listed = (await (await call(request, partners.other, 'GET', '/partner/webhook-endpoints')).json()) as { endpoints: Endpoint[] };
      expect(listed.endpoints.map((e) => e.id)).not.toContain(endpoint.id);
      // Still there for its own network.
      const own = (await (await call(request, partners.open, 'GET', '/partner/webhook-endpoints')).json()) as { endpoints: Endpoint[] };
      expect(own.endpoints.map((e) => e.id)).toContain(endpoint.id);
    });
  });

  test('without a key every route is a 401', async ({ request }) => {
    await expectProblem(await call(request, { key: null }, 'GET', '/partner/webhook-endpoints'), 401, 'unauthorized');
    await expectProblem(await call(request, { key: null }, 'POST', '/partner/webhook-endpoints', { url: hookUrl }), 401, 'unauthorized');
  });
});
