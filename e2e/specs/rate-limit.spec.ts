// docs/interfaces.md §10: each network may make RATE_LIMIT_MAX requests per RATE_LIMIT_WINDOW_MS to
// the /partner routes; beyond that, 429 problem+json with Retry-After and the IETF RateLimit fields,
// and nothing changes. The limit is read from the service's own RateLimit-Policy field, so the spec
// works against any BASE_URL (the local stack and the kind cluster set a small limit; see
// docs/qa.md). It uses the worker's `limited` partner, a network no other test sends with.
import type { APIResponse } from '@playwright/test';
import { expect, expectProblem, test } from '../support/fixtures.js';

/** The first member of a structured-field list such as `"partner";q=200;w=10`: its name and parameters. */
function firstMember(field: string | undefined, name: string): Record<string, number> {
  expect(field, `the ${name} field`).toBeDefined();
  const [label, ...parameters] = field!.split(',')[0]!.trim().split(';');
  expect(label, `${name}: ${field}`).toMatch(/^"[^"]+"$/);
  const values: Record<string, number> = {};
  for (const parameter of parameters) {
    const [key, value] = parameter.trim().split('=');
    expect(value, `${name}: ${field}`).toMatch(/^\d+$/);
    values[key!] = Number(value);
  }
  return values;
}

/** RateLimit-Policy: the quota `q` per window of `w` seconds. */
function policyOf(response: APIResponse): { q: number; w: number } {
  const { q, w } = firstMember(response.headers()['ratelimit-policy'], 'RateLimit-Policy');
  expect(q).toBeGreaterThan(0);
  expect(w).toBeGreaterThan(0);
  return { q: q!, w: w! };
}

/** RateLimit: what is left (`r`) and the seconds until the window resets (`t`). */
function remainingOf(response: APIResponse): { r: number; t: number } {
  const { r, t } = firstMember(response.headers().ratelimit, 'RateLimit');
  expect(r).toBeGreaterThanOrEqual(0);
  expect(t).toBeGreaterThanOrEqual(0);
  return { r: r!, t: t! };
}

test.describe('A network over its rate limit gets 429, and the 429 changes nothing', () => {
  // At most RATE_LIMIT_MAX + 1 requests: generous for a large production limit.
  test.setTimeout(120_000);

  test('requests beyond RATE_LIMIT_MAX in one window: 429 problem+json with Retry-After and the RateLimit fields', async ({
    api,
    given,
    partners,
    seeder,
    stores,
  }) => {
    const partner = partners.limited;
    // Enables of an approved agent spend the budget and change nothing; the disable that is refused
    // is of an agent with campaigns, so that "nothing changed" can be seen in every store.
    const spender = await given.agent(partner);
    const target = await given.agent(partner, { campaigns: { unpaused: 2 } });
    const enableSpender = () => api.setStatus(partner, { agentId: spender.agentId, enabled: true });

    const first = await enableSpender();
    expect(first.status(), await first.text()).toBe(200);
    test.skip(first.headers()['ratelimit-policy'] === undefined, 'the service under test has no rate limit (RATE_LIMIT_MAX=0)');
    const policy = policyOf(first);
    let { r: remaining } = remainingOf(first);
    expect(remaining).toBeLessThan(policy.q);
    let sent = 1;

    // Spend what is left of the window, in concurrent bursts (quick, so the window cannot roll over
    // half-way): after each burst r has gone down by exactly its size, and never below 0.
    while (remaining > 0) {
      const burst = Math.min(remaining, 20);
      const responses = await Promise.all(Array.from({ length: burst }, enableSpender));
      sent += burst;
      for (const response of responses) expect(response.status(), await response.text()).toBe(200);
      const next = Math.min(...responses.map((response) => remainingOf(response).r));
      expect(next, 'RateLimit r did not go down by the requests sent: did the window roll over?').toBe(remaining - burst);
      remaining = next;
    }
    expect(sent, `no more than the limit (${policy.q}) was spent before the 429`).toBeLessThanOrEqual(policy.q);

    const limited = await api.setStatus(partner, { agentId: target.agentId, enabled: false });
    sent += 1;
    expect(sent).toBeLessThanOrEqual(policy.q + 1);
    const body = await expectProblem(limited, 429, 'rate-limited');
    expect(body.title).toBeTruthy();
    expect(body.detail).toBeTruthy();

    const retryAfter = limited.headers()['retry-after'];
    expect(retryAfter).toMatch(/^\d+$/);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(retryAfter)).toBeLessThanOrEqual(policy.w);
    expect(policyOf(limited)).toEqual(policy);
    const state = remainingOf(limited);
    expect(state.r).toBe(0);
    expect(state.t).toBeLessThanOrEqual(policy.w);

    // Nothing changed: the agent is still approved and no campaign was paused anywhere.
    expect(await seeder.agentApproved(target.agentId)).toBe(true);
    expect(await stores.pausedIn(target.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
  });
});
