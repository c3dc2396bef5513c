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
  given,
  partners,
  simulator,
}) => {
  const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
  await simulator.setMode('slow', { delayMs: 2_500 });
  const started = Date.now();
  const response = await api.setStatus(
    partners.open,
    { agentId: agent.agentId, enabled: false },
    { headers: { prefer: 'respond-async, wait=1' } },
  );
  expect(response.status(), await response.text()).toBe(202);
  expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
  expect(response.headers()['preference-applied']).toBe('respond-async');
});

test('a second request with an Idempotency-Key still in use gets 409 with Retry-After', async ({ api, given, partners, simulator }) => {
  const agent = await given.agent(partners.open, { campaigns: { unpaused: 3 } });
  await simulator.setMode('slow', { delayMs: 2_000 });
  const headers = { 'idempotency-key': randomUUID() };
  const first = api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }, { headers });
  await new Promise((resolve) => setTimeout(resolve, 500));
  const second = await api.setStatus(partners.open, { agentId: agent.agentId, enabled: false }, { headers });
  await expectProblem(second, 409, 'idempotency-key-in-use');
  expect(Number(second.headers()['retry-after'])).toBeGreaterThanOrEqual(1);
  expect((await first).status()).toBe(200);
});
