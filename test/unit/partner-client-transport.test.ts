import { describe, expect, it } from 'vitest';
import { PartnerApiError } from '../../clients/typescript/src/errors.js';
import { backoffMs, createTransport, defaultRetry, retryAfterMs } from '../../clients/typescript/src/transport.js';

// The typed client's retry arithmetic (clients/typescript/src/transport.ts); its behaviour against
// the built service is test/integration/partner-client.process.test.ts.
describe('backoff and Retry-After', () => {
  it('the backoff is a random wait up to base * 2^(attempt-1), never above the cap', () => {
    const retry = { ...defaultRetry, baseDelayMs: 100, maxDelayMs: 1_000 };
    expect([1, 2, 3, 4].map((attempt) => backoffMs(attempt, retry, () => 0.999))).toEqual([99, 199, 399, 799]);
    expect(backoffMs(20, retry, () => 0.999)).toBe(999);
    expect(backoffMs(3, retry, () => 0)).toBe(0);
  });

  it('Retry-After in seconds or as an HTTP date', () => {
    const now = Date.parse('2026-11-28T12:00:00Z');
    expect(retryAfterMs('3', now)).toBe(3_000);
    expect(retryAfterMs('Sat, 28 Nov 2026 12:00:05 GMT', now)).toBe(5_000);
    expect(retryAfterMs('Sat, 28 Nov 2026 11:00:00 GMT', now)).toBe(0);
    expect(retryAfterMs('soon', now)).toBeUndefined();
    expect(retryAfterMs(null, now)).toBeUndefined();
  });
});

describe('which answers are repeated', () => {
  /** A transport over a scripted fetch: each attempt takes the next answer. */
  function scripted(answers: Array<[number, Record<string, string>]>) {
    const waits: number[] = [];
    const keys: Array<string | null> = [];
    const transport = createTransport({
      baseUrl: 'http://partner.invalid',
      apiKey: 'partner-test-key-made-here',
      apiVersion: '2026-12-01',
      retry: { ...defaultRetry, baseDelayMs: 10 },
      onWarning: () => undefined,
      sleep: async (ms) => void waits.push(ms),
      fetch: async (_input, init) => {
        keys.push(new Headers(init?.headers).get('idempotency-key'));
        const [status, headers] = answers.shift()!;
        const problem = {
          type: `urn:partner-agent-status:problem:${headers.type ?? 'x'}`,
          title: 't',
          status,
          detail: 'd',
          requestId: 'r',
        };
        return new Response(status < 300 ? '{}' : JSON.stringify(problem), {
          status,
          headers: { 'content-type': status < 300 ? 'application/json' : 'application/problem+json', ...headers },
        });
      },
    });
    return { waits, keys, send: () => transport.send({ method: 'POST', path: '/p', body: {}, repeatableAfterNetworkError: true }) };
  }

  it('a 503 and a 409 idempotency-key-in-use are repeated after Retry-After, with one Idempotency-Key', async () => {
    const run = scripted([
      [503, { 'retry-after': '2' }],
      [409, { 'retry-after': '1', type: 'idempotency-key-in-use' }],
      [200, {}],
    ]);
    expect((await run.send()).status).toBe(200);
    expect(run.waits[0]).toBeGreaterThanOrEqual(2_000);
    expect(run.waits[1]).toBeGreaterThanOrEqual(1_000);
    expect(new Set(run.keys).size).toBe(1);
  });

  it('another 409, a 400 or a 500 is not repeated', async () => {
    for (const status of [400, 409, 422, 500]) {
      const run = scripted([
        [status, {}],
        [200, {}],
      ]);
      await expect(run.send()).rejects.toBeInstanceOf(PartnerApiError);
      expect(run.keys).toHaveLength(1);
    }
  });

  it('a Retry-After beyond maxRetryAfterMs is not waited for', async () => {
    const run = scripted([[429, { 'retry-after': '3600' }]]);
    await expect(run.send()).rejects.toMatchObject({ status: 429, retryAfterSeconds: 3600 });
    expect(run.waits).toEqual([]);
  });
});
