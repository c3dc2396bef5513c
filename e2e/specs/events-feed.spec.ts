// docs/interfaces.md §17, the partner events feed, against any BASE_URL: a network's changes read
// back in pages and live on a stream, resumed with Last-Event-ID, never another network's; the
// refusals (a malformed cursor, an unknown type). Streams are read with Node's fetch (Playwright's
// request context waits for a whole body).

import { openStream, readAllPages } from '../../test/support/event-feed-client.js';
import { waitFor } from '../../test/support/wait.js';
import { expect, expectProblem, mediaType, test } from '../support/fixtures.js';

test.describe('the events feed of a network', () => {
  test("pages hold the network's changes, each agent's in order, and nothing of another network", async ({
    api,
    given,
    partners,
    baseURL,
  }) => {
    const agent = await given.agent(partners.open);
    const start = await readAllPages(baseURL!, partners.open.key);
    for (const enabled of [false, true, false, true])
      expect((await api.setStatus(partners.open, { agentId: agent.agentId, enabled })).status()).toBe(200);
    const read = await waitFor(
      async () => {
        const pages = await readAllPages(baseURL!, partners.open.key, {
          after: start.cursor,
          limit: 2,
          query: `agentId=${encodeURIComponent(agent.agentId)}`,
        });
        return pages.events.filter((e) => !e.type.endsWith('.completed')).length >= 4 ? pages : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 200, failure: 'the changes did not reach the feed' },
    );
    const changes = read.events.filter((e) => !e.type.endsWith('.completed'));
    expect(changes.map((e) => e.type)).toEqual([
      'partner-agent-status.agent.disabled',
      'partner-agent-status.agent.enabled',
      'partner-agent-status.agent.disabled',
      'partner-agent-status.agent.enabled',
    ]);
    expect(changes.map((e) => e.data.changeId)).toEqual([...changes.map((e) => e.data.changeId)].sort((a, b) => a - b));
    const others = await readAllPages(baseURL!, partners.other.key, {
      after: start.cursor,
      query: `agentId=${encodeURIComponent(agent.agentId)}`,
    });
    expect(others.events).toEqual([]);
  });

  test('a stream shows changes as they commit and resumes after Last-Event-ID without repeating one', async ({
    api,
    given,
    partners,
    baseURL,
  }) => {
    const agent = await given.agent(partners.open);
    const query = `agentId=${encodeURIComponent(agent.agentId)}&types=agent.enabled,agent.disabled`;
    const first = await openStream(baseURL!, partners.open.key, { after: (await readAllPages(baseURL!, partners.open.key)).cursor, query });
    expect(first.response.status).toBe(200);
    expect(first.response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false });
    await waitFor(() => first.messages.length >= 1, { timeoutMs: 5_000, intervalMs: 50, failure: 'nothing streamed' });
    await first.close();
    await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true });
    const resumed = await openStream(baseURL!, partners.open.key, { lastEventId: first.messages[0]!.id, query });
    try {
      await waitFor(() => resumed.messages.length >= 1, { timeoutMs: 5_000, intervalMs: 50, failure: 'nothing after the resume' });
      expect([...first.messages, ...resumed.messages].map((m) => m.event)).toEqual([
        'partner-agent-status.agent.disabled',
        'partner-agent-status.agent.enabled',
      ]);
      expect(JSON.parse(resumed.messages[0]!.data).subject).toBe(agent.agentId);
    } finally {
      await resumed.close();
    }
  });

  test('refuses a cursor it did not make and an unknown event type, as problems', async ({ request, partners }) => {
    const get = (query: string) =>
      request.get(`/partner/events?${query}`, { headers: { 'x-api-key': partners.open.key }, failOnStatusCode: false });
    await expectProblem(await get('after=not-a-cursor'), 400, 'validation');
    await expectProblem(await get('types=agent.exploded'), 400, 'validation');
    await expectProblem(await get('limit=501'), 400, 'validation');
    const page = await get('limit=1');
    expect(page.status()).toBe(200);
    expect(mediaType(page)).toBe('application/json');
    expect(await page.json()).toMatchObject({ events: expect.any(Array), nextCursor: expect.any(String), hasMore: expect.any(Boolean) });
    const unauthenticated = await request.get('/partner/events', { failOnStatusCode: false });
    await expectProblem(unauthenticated, 401, 'unauthorized');
  });
});
