// The OpenAPI document at /partner/openapi.json, and what is reachable where: through the
// ingress only /partner/* (charts/partner-agent-status/templates/ingress.yaml); on the service
// itself also the probes.
import { expect, expectProblem, mediaType, test } from '../support/fixtures.js';

test.describe('The OpenAPI document is served at /partner/openapi.json without a key', () => {
  test('it describes POST /partner/agents/status and its x-api-key scheme', async ({ request }) => {
    const response = await request.get('/partner/openapi.json');
    expect(response.status()).toBe(200);
    expect(mediaType(response)).toBe('application/json');
    const document = await response.json();
    expect(document.openapi).toMatch(/^3\.1\./);
    const operation = document.paths['/partner/agents/status'].post;
    expect(operation.security).toEqual([{ apiKey: [] }]);
    expect(Object.keys(operation.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '404', '413', '415', '500']));
    expect(document.components.securitySchemes.apiKey).toMatchObject({ type: 'apiKey', in: 'header', name: 'x-api-key' });
    // Probes are not partner API and are left out.
    expect(Object.keys(document.paths).every((path) => path.startsWith('/partner/'))).toBe(true);
  });
});

test.describe('Through the ingress only /partner/* is routed', () => {
  test.skip(
    ({ settings }) => !settings.viaIngress,
    'BASE_URL is the service itself, not the ingress: set E2E_VIA_INGRESS=1 when BASE_URL is the ingress (k8s-dev/run-e2e.sh does)',
  );

  for (const path of ['/livez', '/readyz', '/metrics', '/']) {
    test(`${path} is not reachable through the ingress (404)`, async ({ request }) => {
      const response = await request.get(path, { failOnStatusCode: false });
      expect(response.status()).toBe(404);
      // The ingress controller's own 404, not the service's problem document.
      expect(mediaType(response)).not.toBe('application/problem+json');
    });
  }

  test('/partner/openapi.json and the partner API are reachable through the ingress', async ({ request }) => {
    expect((await request.get('/partner/openapi.json')).status()).toBe(200);
    const response = await request.post('/partner/agents/status', {
      headers: { 'content-type': 'application/json' },
      data: '{}',
      failOnStatusCode: false,
    });
    // The service's own answer (a problem with the service's request id), not the ingress's.
    await expectProblem(response, 401, 'unauthorized');
  });
});

test.describe('The service itself answers its probes', () => {
  test.skip(({ settings }) => settings.viaIngress, 'BASE_URL is the ingress, which does not route the probes (see the ingress spec above)');

  test('/livez and /readyz answer 200', async ({ request }) => {
    expect((await request.get('/livez')).status()).toBe(200);
    const ready = await request.get('/readyz');
    expect(ready.status()).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready' });
  });
});
