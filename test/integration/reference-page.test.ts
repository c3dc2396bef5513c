import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { statusPath, urls } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

// The page itself is checked in a real browser by e2e/browser/reference-page.spec.ts; this file
// checks what the server answers.
const db = testDatabase();
let svc: TestService;

beforeAll(async () => {
  // A limit of one request per window: the page must not count against it.
  svc = await startTestService({
    partners: [{ key: newApiKey(), networkId: await db.network(), name: 'docs-reader' }],
    env: { RATE_LIMIT_MAX: '1' },
  });
});
afterAll(async () => {
  await svc?.close();
  await db.close();
});

describe('the partner reference page at /partner/docs', () => {
  it('redirects /partner/docs to the page', async () => {
    const response = await svc.app.inject('/partner/docs');
    expect(response.statusCode).toBe(301);
    expect(response.headers.location).toBe('/partner/docs/');
  });

  it('serves the page without a key, never cached, under a policy that allows its one inline script by hash', async () => {
    const response = await svc.app.inject('/partner/docs/');
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(response.headers['cache-control']).toBe('no-store');
    expect(response.headers['x-request-id']).toBeTruthy();
    // Rendered from the documents the service serves, one per API version, the newest the default,
    // with the script from this origin.
    expect(response.body).toContain('"url": "/partner/openapi.json?version=2026-12-01"');
    expect(response.body).toContain('"url": "/partner/openapi.json?version=2026-11-21"');
    // The script by its immutable, hashed name (the plain name stays served, below).
    expect(response.body).toMatch(/<script src="js\/scalar\.[0-9a-f]{16}\.js"><\/script>/);
    expect(response.body).not.toMatch(/https?:\/\//);

    const policy = String(response.headers['content-security-policy']);
    const directives = Object.fromEntries(policy.split('; ').map((directive) => [directive.split(' ')[0], directive]));
    const inline = [...response.body.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map(([, source]) => source ?? '');
    expect(inline).toHaveLength(1);
    const hash = createHash('sha256').update(inline[0]!).digest('base64');
    expect(directives['script-src']).toBe(`script-src 'self' 'sha256-${hash}'`);
    expect(directives['default-src']).toBe("default-src 'none'");
    expect(directives['connect-src']).toBe("connect-src 'self'");
    expect(policy).not.toContain('unsafe-eval');
    expect(policy).not.toMatch(/https?:/);
  });

  it('serves the script from the package: cacheable, revalidated by its ETag, gzipped when asked', async () => {
    const plain = await svc.app.inject('/partner/docs/js/scalar.js');
    expect(plain.statusCode).toBe(200);
    expect(plain.headers['content-type']).toBe('application/javascript; charset=utf-8');
    expect(plain.headers['cache-control']).toBe('public, max-age=3600');
    expect(plain.headers.vary).toBe('accept-encoding');
    expect(plain.rawPayload.length).toBeGreaterThan(1_000_000);
    const etag = String(plain.headers.etag);
    expect(etag).toMatch(/^"[\w-]+"$/);

    const zipped = await svc.app.inject({ url: '/partner/docs/js/scalar.js', headers: { 'accept-encoding': 'gzip, deflate, br' } });
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(zipped.rawPayload.length).toBeLessThan(plain.rawPayload.length / 2);
    expect(gunzipSync(zipped.rawPayload).equals(plain.rawPayload)).toBe(true);

    const revalidated = await svc.app.inject({ url: '/partner/docs/js/scalar.js', headers: { 'if-none-match': etag } });
    expect(revalidated.statusCode).toBe(304);
    expect(revalidated.rawPayload.length).toBe(0);
  });

  it('is not rate limited and needs no key', async () => {
    const statuses = [];
    for (let i = 0; i < 3; i += 1) statuses.push((await svc.app.inject('/partner/docs/')).statusCode);
    expect(statuses).toEqual([200, 200, 200]);
  });

  it('is left out of the OpenAPI document', async () => {
    const document = (await svc.app.inject(urls.openApi)).json() as { paths: Record<string, unknown> };
    expect(Object.keys(document.paths).filter((path) => path.startsWith('/partner/docs'))).toEqual([]);
    expect(Object.keys(document.paths)).toContain(statusPath);
  });
});
