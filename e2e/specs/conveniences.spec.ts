// docs/interfaces.md §11, against any BASE_URL: Prefer: respond-async, Idempotency-Key, ETag and
// If-Match, and the status history. The parts that need a slow spend management (wait=N running
// out, a key in use) are conveniences.serial.spec.ts.
import { randomUUID } from 'node:crypto';
import type { APIRequestContext, APIResponse } from '@playwright/test';
import { expect, expectProblem, type Partner, test } from '../support/fixtures.js';

function read(request: APIRequestContext, partner: Partner, path: string): Promise<APIResponse> {
  return request.get(path, { headers: { 'x-api-key': partner.key }, failOnStatusCode: false });
}

/** Headers and body with what differs between two requests (request id, date, length) taken out. */
async function shapeOf(response: APIResponse) {
  const { 'x-request-id': id = '', date: _date, 'content-length': _length, ...headers } = response.headers();
  return { status: response.status(), headers, body: (await response.text()).replace(id, '') };
}

test.describe('Prefer: respond-async', () => {
  test('a disable answers 202 once recorded, with Location and Preference-Applied; the service finishes it', async ({
    api,
    request,
    given,
    partners,
    seeder,
    stores,
  }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 150 } });
    const response = await api.setStatus(
      partners.open,
      { agentId: agent.agentId, enabled: false },
      { headers: { prefer: 'respond-async' } },
    );
    expect(response.status(), await response.text()).toBe(202);
    expect(response.headers()['preference-applied']).toBe('respond-async');
    const location = response.headers().location!;
    expect(location).toBe(`/partner/agents/${agent.agentId}/status`);
    expect(await response.json()).toMatchObject({ agentId: agent.agentId, enabled: false, disableInProgress: true });
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
    await expect
      .poll(async () => (await (await read(request, partners.open, location)).json()).disableInProgress, { timeout: 20_000 })
      .toBe(false);
    expect((await stores.pausedIn(agent.unpaused)).database).toHaveLength(150);
  });

  test('nothing left to pause, or an enable: 200 as without the preference; wait=N answers 200 when ready in time', async ({
    api,
    given,
    partners,
  }) => {
    const empty = await given.agent(partners.open);
    const disabled = await api.setStatus(
      partners.open,
      { agentId: empty.agentId, enabled: false },
      { headers: { prefer: 'respond-async' } },
    );
    expect(disabled.status()).toBe(200);
    const enabled = await api.setStatus(partners.open, { agentId: empty.agentId, enabled: true }, { headers: { prefer: 'respond-async' } });
    expect(enabled.status()).toBe(200);
    expect(enabled.headers()['preference-applied']).toBeUndefined();

    const small = await given.agent(partners.open, { campaigns: { unpaused: 2 } });
    const quick = await api.setStatus(
      partners.open,
      { agentId: small.agentId, enabled: false },
      { headers: { prefer: 'respond-async, wait=20' } },
    );
    expect(quick.status()).toBe(200);
    expect(await quick.json()).toMatchObject({ pausedCampaignCount: 2 });
  });
});

test.describe('Idempotency-Key', () => {
  test('a repeat gets the first answer with Idempotent-Replayed; another body gets 422', async ({ api, given, partners, seeder }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
    const headers = { 'idempotency-key': randomUUID() };
    const first = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }, { headers });
    expect(first.status()).toBe(200);
    const again = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }, { headers });
    expect(again.status()).toBe(200);
    expect(again.headers()['idempotent-replayed']).toBe('true');
    expect(await again.text()).toBe(await first.text());
    await expectProblem(
      await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true }, { headers }),
      422,
      'idempotency-key-reused',
    );
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
    await expectProblem(
      await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true }, { headers: { 'idempotency-key': 'x'.repeat(256) } }),
      400,
      'validation',
    );
  });

  test('a replayed enable after a later disable leaves the agent disabled; another network has keys of its own', async ({
    api,
    given,
    partners,
    seeder,
  }) => {
    const agent = await given.agent(partners.open, { approved: false });
    const headers = { 'idempotency-key': randomUUID() };
    expect((await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true }, { headers })).status()).toBe(200);
    expect((await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false })).status()).toBe(200);
    const replay = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: true }, { headers });
    expect(replay.headers()['idempotent-replayed']).toBe('true');
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);

    const theirs = await given.agent(partners.other, { approved: false });
    const other = await api.setStatus(partners.other, { agentId: theirs.agentId, enabled: false }, { headers });
    expect(other.status()).toBe(200);
    expect(other.headers()['idempotent-replayed']).toBeUndefined();
  });
});

test.describe('ETag and If-Match', () => {
  test('the status carries an ETag; a stale one gets 412 and changes nothing, the current one and * make the change', async ({
    api,
    request,
    given,
    partners,
    seeder,
  }) => {
    const agent = await given.agent(partners.strict);
    const path = `/partner/agents/${agent.agentId}/status`;
    const stale = (await read(request, partners.strict, path)).headers().etag!;
    expect(stale).toMatch(/^"[^"]+"$/);
    expect((await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: true })).status()).toBe(200);
    const current = (await read(request, partners.strict, path)).headers().etag!;
    expect(current).not.toBe(stale);

    await expectProblem(
      await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: false }, { headers: { 'if-match': stale } }),
      412,
      'precondition-failed',
    );
    expect(await seeder.agentApproved(agent.agentId)).toBe(true);
    expect((await read(request, partners.strict, path)).headers().etag).toBe(current);
    const made = await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: false }, { headers: { 'if-match': current } });
    expect(made.status()).toBe(200);
    expect(await seeder.agentApproved(agent.agentId)).toBe(false);
    expect(
      (await api.setStatus(partners.strict, { agentId: agent.agentId, enabled: true }, { headers: { 'if-match': '*' } })).status(),
    ).toBe(200);
  });

  test('the 404 of another network is byte for byte the one of nowhere, with or without each header', async ({ api, given, partners }) => {
    const theirs = await given.agent(partners.other, { campaigns: { unpaused: 1 } });
    const nowhere = `us-east-1:${randomUUID()}`;
    const plain = await shapeOf(await api.setStatus(partners.open, { agentId: nowhere, enabled: false }));
    expect(plain.status).toBe(404);
    for (const headers of <Record<string, string>[]>[
      {},
      { 'if-match': '"v1"' },
      { prefer: 'respond-async' },
      { 'idempotency-key': randomUUID() },
    ]) {
      for (const agentId of [theirs.agentId, nowhere]) {
        // A key of its own for each request: one key for two agents would be a 422.
        const sent = 'idempotency-key' in headers ? { 'idempotency-key': randomUUID() } : headers;
        expect(await shapeOf(await api.setStatus(partners.open, { agentId, enabled: false }, { headers: sent }))).toEqual(plain);
      }
    }
  });
});

test.describe('GET /partner/agents/{agentId}/status-changes', () => {
  test('lists the changes newest first, a page at a time, never with a key; 404 as the status endpoint', async ({
    api,
    request,
    given,
    partners,
  }) => {
    const agent = await given.agent(partners.strict);
    for (const enabled of [false, true, false]) {
      expect((await api.setStatus(partners.strict, { agentId: agent.agentId, enabled })).status()).toBe(200);
    }
    const base = `/partner/agents/${agent.agentId}/status-changes`;
    const first = await read(request, partners.strict, `${base}?limit=2`);
    expect(first.status(), await first.text()).toBe(200);
    const page1 = await first.json();
    expect(page1.changes.map((c: { enabled: boolean }) => c.enabled)).toEqual([false, true]);
    expect(page1.changes[0]).toMatchObject({ partnerName: partners.strict.name, requestId: expect.any(String) });
    expect(page1.nextBefore).toBe(page1.changes[1].changeId);
    const page2 = await (await read(request, partners.strict, `${base}?limit=2&before=${page1.nextBefore}`)).json();
    expect(page2.changes.map((c: { enabled: boolean }) => c.enabled)).toEqual([false]);
    expect(page2.nextBefore).toBeNull();
    expect(JSON.stringify([page1, page2])).not.toContain(partners.strict.key);

    await expectProblem(await read(request, partners.strict, `${base}?limit=101`), 400, 'validation');
    const theirs = await given.agent(partners.other);
    const a = await read(request, partners.strict, `/partner/agents/${theirs.agentId}/status-changes`);
    const b = await read(request, partners.strict, `/partner/agents/us-east-1:${randomUUID()}/status-changes`);
    await expectProblem(a, 404, 'not-found');
    expect(await shapeOf(a)).toEqual(await shapeOf(b));
  });
});
