import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partnerPath, partnerPrefix, partnerRoutes } from '../../src/http/paths.js';
import { stubApp } from '../support/stub-app.js';

const networkId = '00000000-0000-4000-8000-0000000000aa';
const parameters: Record<string, string> = {
  agentId: 'us-east-1:00000000-0000-4000-8000-000000000001',
  endpointId: '00000000-0000-4000-8000-000000000002',
  deliveryId: '00000000-0000-4000-8000-000000000003',
};
/** The API documents: read without a key (a partner reads them before it has one). */
const documents = new Set<string>([partnerRoutes.openApi, partnerRoutes.referencePage]);
const methods = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

describe('the partner scope authenticates itself', () => {
  let app: Awaited<ReturnType<typeof stubApp>>;
  // Made at run time: no key is ever written into a test.
  const key = `test-${crypto.randomUUID()}`;

  beforeAll(async () => {
    app = await stubApp({ key, networkId });
    await app.ready();
  });
  afterAll(() => app.close());

  /** What each method of a route of the path table answers without a key (405s left out: the route does not serve them). */
  async function answersWithoutKey(route: string): Promise<Record<string, number>> {
    const url = `${partnerPrefix}${route}`.replace(/:(\w+)/g, (_match, name: string) => parameters[name]!);
    const answers: Record<string, number> = {};
    for (const method of methods) {
      const { statusCode } = await app.inject({ method, url, headers: { 'content-type': 'application/json' }, payload: '{}' });
      if (statusCode !== 405) answers[method] = statusCode;
    }
    return answers;
  }

  it('answers 401 without a key on every method of every partner route of the path table but the documents', async () => {
    const routes = Object.values(partnerRoutes).filter((route) => !documents.has(route));
    expect(routes.length).toBeGreaterThanOrEqual(8);
    for (const route of routes) {
      const answers = await answersWithoutKey(route);
      expect(Object.keys(answers).length, `${route} serves no method`).toBeGreaterThan(0);
      for (const [method, status] of Object.entries(answers)) expect(status, `${method} ${route}`).toBe(401);
    }
  });

  it('serves the documents without a key', async () => {
    for (const route of documents) {
      const answers = await answersWithoutKey(route);
      expect(answers.GET, route).toBeGreaterThanOrEqual(200);
      expect(answers.GET, route).toBeLessThan(400);
    }
  });

  it('lets a known key through to the route (the same walk tells a guarded route from a closed one)', async () => {
    const url = partnerPath(partnerRoutes.agentStatusRead).replace(':agentId', parameters.agentId!);
    const { statusCode } = await app.inject({ method: 'GET', url, headers: { 'x-api-key': key } });
    expect(statusCode).toBe(404);
  });
});
