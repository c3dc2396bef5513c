// docs/interfaces.md §11, the parts that need spend management to answer slowly: wait=N running
// out (202 after about N seconds) and an Idempotency-Key still in use (409 with Retry-After). The
// simulator's mode is global state: the `shared-simulator` project runs this file alone.
import { randomUUID } from 'node:crypto';
import { expect, expectProblem, test } from '../support/fixtures.js';

test.describe.configure({ mode: 'serial' });

test.afterEach(async ({ simulator }) => {
  await simulator.setMode('ok');
});

test('Prefer: respond-async, wait=1 answers 202 after about a second when pausing takes longer', async ({
  api,
  request,
  given,
  partners,
  simulator,
}) => {
  // 20 batches at 800 ms a call (below the service's spend-management time-out): more batches than
  // are sent at once, so the answer takes two rounds, about 1.6 s.
  const agent = await given.agent(partners.open, { campaigns: { unpaused: 2_000 } });
  await simulator.setMode('slow', { delayMs: 800 });
  const started = Date.now();
  const response = await api.setStatus(
    partners.open,
    { agentId: agent.agentId, enabled: false },
    { headers: { prefer: 'respond-async, wait=1' } },
  );
  expect(response.status(), await response.text()).toBe(202);
  expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
  expect(response.headers()['preference-applied']).toBe('respond-async');
  // The disable finishes by itself; nothing of it may be left pending when the worker cleans up.
  await simulator.setMode('ok');
  await expect
    .poll(
      async () =>
        (await (await request.get(response.headers().location!, { headers: { 'x-api-key': partners.open.key } })).json()).disableInProgress,
      { timeout: 20_000 },
    )
    .toBe(false);
});

test('a second request with an Idempotency-Key still in use gets 409 with Retry-After', async ({ api, given, partners, simulator }) => {
  const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
  await simulator.setMode('slow', { delayMs: 800 });
  const headers = { 'idempotency-key': randomUUID() };
  const first = api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }, { headers });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const second = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }, { headers });
  await expectProblem(second, 409, 'idempotency-key-in-use');
  expect(Number(second.headers()['retry-after'])).toBeGreaterThanOrEqual(1);
  expect((await first).status()).toBe(200);
});
