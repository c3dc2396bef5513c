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
  // About RATE_LIMIT_MAX + 1 requests (a window more for each rollover): generous for a large production limit.
  test.setTimeout(180_000);

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
    let state = remainingOf(first);
    expect(state.r).toBeLessThan(policy.q);

    // Spend what is left of the window, in concurrent bursts: after each burst r has gone down by
    // exactly its size, and never below 0. A busy machine (a second test suite beside this one) can
    // take longer than a window: a window that rolls over under a burst (r went down by less) or is
    // about to when the budget is spent (t under 2 s) is waited out and the next one spent instead,
    // so that the refused request surely falls in the window it was refused for.
    let rollovers = 0;
    const nextWindow = async (reason: string) => {
      rollovers += 1;
      expect(rollovers, `the window rolled over ${rollovers} times (${reason}): the machine is too slow to spend one`).toBeLessThanOrEqual(
        5,
      );
      await new Promise((resolve) => setTimeout(resolve, (state.t + 1) * 1_000));
      const probe = await enableSpender();
      expect(probe.status(), await probe.text()).toBe(200);
      state = remainingOf(probe);
    };
    for (;;) {
      while (state.r > 0) {
        const burst = Math.min(state.r, 20);
        const responses = await Promise.all(Array.from({ length: burst }, enableSpender));
        for (const response of responses) expect(response.status(), await response.text()).toBe(200);
        const next = Math.min(...responses.map((response) => remainingOf(response).r));
        if (next !== state.r - burst) {
          // Some of the burst counted in the next window: r can only have gone down by less.
          expect(next, 'RateLimit r went down by more than the requests sent').toBeGreaterThan(state.r - burst);
          await nextWindow('under a burst');
          continue;
        }
        state = { r: next, t: Math.min(...responses.map((response) => remainingOf(response).t)) };
      }
      if (state.t >= 2) break;
      await nextWindow('as the budget ran out');
    }

    const limited = await api.setStatus(partner, { agentId: target.agentId, enabled: false });
    const body = await expectProblem(limited, 429, 'rate-limited');
    expect(body.title).toBeTruthy();
    expect(body.detail).toBeTruthy();

    const retryAfter = limited.headers()['retry-after'];
    expect(retryAfter).toMatch(/^\d+$/);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(retryAfter)).toBeLessThanOrEqual(policy.w);
    expect(policyOf(limited)).toEqual(policy);
    const after = remainingOf(limited);
    expect(after.r).toBe(0);
    expect(after.t).toBeLessThanOrEqual(policy.w);

    // Nothing changed: the agent is still approved and no campaign was paused anywhere.
    expect(await seeder.agentApproved(target.agentId)).toBe(true);
    expect(await stores.pausedIn(target.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
  });
});
