// The partner reference page (GET /partner/docs) in a real browser: it renders the service's own
// OpenAPI document, shows the operations, their statuses and the x-api-key scheme, logs no console
// error, and nothing it loads comes from anywhere but the host that serves it.
import { expect, type Page, test } from '@playwright/test';

const operations = [
  { title: 'Enable or disable an agent of your network', method: 'POST', path: '/partner/agents/status' },
  { title: 'Read the status of an agent of your network', method: 'GET', path: '/partner/agents/{agentId}/status' },
];

/** Every request leaving the served host is aborted and recorded; console errors are recorded too. */
async function watch(page: Page, servedHost: string) {
  const leftTheHost: string[] = [];
  const consoleErrors: string[] = [];
  await page.context().route('**/*', async (route) => {
    const url = new URL(route.request().url());
    const local = url.protocol === 'data:' || url.protocol === 'blob:' || url.host === servedHost;
    if (local) return route.continue();
    leftTheHost.push(url.href);
    return route.abort('blockedbyclient');
  });
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));
  return { leftTheHost, consoleErrors };
}

test.describe('The partner reference page at /partner/docs', () => {
  test('shows the operations, their statuses and the x-api-key scheme, from this host only, with no console error', async ({
    page,
    baseURL,
  }) => {
    const served = new URL(baseURL!);
    // Locally the service listens on 127.0.0.1; through BASE_URL, the page's own host is the one allowed.
    const { leftTheHost, consoleErrors } = await watch(page, served.host);

    const response = await page.goto('/partner/docs');
    expect(response?.status()).toBe(200);
    expect(new URL(page.url()).pathname).toBe('/partner/docs/');
    await expect(page).toHaveTitle('Partner Agent Status API reference');
    await expect(page.getByRole('heading', { name: 'Partner Agent Status API' }).first()).toBeVisible();

    // Both operations, listed by their summaries and linked by method and path.
    for (const { title, method, path } of operations) {
      await expect(page.getByText(title).first()).toBeVisible();
      await expect(
        page
          .getByRole('link', { name: `${method} ${path}`, exact: true })
          .or(page.getByRole('link', { name: `${method.toLowerCase()} ${path}`, exact: true }))
          .first(),
      ).toBeAttached();
    }

    // The status change: its documented statuses, and a request example sending the key in x-api-key.
    await page.getByText(operations[0]!.title).first().click();
    // The page shows one document per API version: the hash names the version shown (the newest).
    await expect(page).toHaveURL(/#\d{4}-\d{2}-\d{2}\/tag\/agents\/POST\/partner\/agents\/status$/);
    const responses = page.getByText('Responses', { exact: true }).first();
    await expect(responses).toBeVisible();
    for (const status of ['200', '400', '401', '404', '429', '500']) {
      await expect(page.getByText(status, { exact: true }).first()).toBeVisible();
    }
    await expect(page.getByText(/urn:partner-agent-status:problem:rate-limited/).first()).toBeVisible();
    await expect(page.getByText(/--header 'x-api-key: /).first()).toBeVisible();
    await expect(page.getByText('Auth Required').first()).toBeVisible();

    expect(leftTheHost).toEqual([]);
    expect(consoleErrors).toEqual([]);
  });

  test('serves its script from the service itself, cacheable, and the page under a content security policy', async ({ request }) => {
    const page = await request.get('/partner/docs/');
    expect(page.status()).toBe(200);
    const policy = page.headers()['content-security-policy'] ?? '';
    expect(policy).toContain("default-src 'none'");
    expect(policy).toMatch(/script-src 'self' 'sha256-[A-Za-z0-9+/]+=*'/);
    expect(policy).not.toMatch(/https?:/);

    const script = await request.get('/partner/docs/js/scalar.js');
    expect(script.status()).toBe(200);
    expect(script.headers()['content-type']).toBe('application/javascript; charset=utf-8');
    expect(script.headers()['cache-control']).toBe('public, max-age=3600');
  });
});
