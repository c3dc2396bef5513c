import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';

// docs/interfaces.md §10 with two built service processes, as two replicas behind one ingress:
// the rate limit is counted in Redis, so they enforce one limit together.
const db = testDatabase();
const key = newApiKey();
let networkId: string;
let environment: Awaited<ReturnType<typeof processEnvironment>>;

beforeAll(async () => {
  networkId = await db.network();
  environment = await processEnvironment([{ key, networkId, name: 'two-replicas' }], {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    RATE_LIMIT_MAX: '6',
    RATE_LIMIT_WINDOW_MS: '60000',
    // Each test run has its own prefix; this file's limit starts from nothing.
    REDIS_KEY_PREFIX: `limits-process:${randomUUID()}:`,
  });
});

afterAll(async () => {
  await environment?.close();
  await db.close();
});

describe('two service processes sharing one Redis', () => {
  it('enforce one rate limit together, and a bad key spends none of it', async () => {
    const [first, second] = await Promise.all([startServiceProcess(environment.env), startServiceProcess(environment.env)]);
    try {
      const agentId = await db.agent(networkId);
      const read = (baseUrl: string, apiKey: string) =>
        fetch(`${baseUrl}/partner/agents/${agentId}/status`, { headers: { 'x-api-key': apiKey } });
      // Bad keys on both: 401, never 429, and no budget spent.
      for (const replica of [first, second, first, second]) expect((await read(replica.baseUrl, `${key}x`)).status).toBe(401);

      const remaining: string[] = [];
      for (let i = 0; i < 6; i += 1) {
        const response = await read((i % 2 === 0 ? first : second).baseUrl, key);
        expect(response.status).toBe(200);
        expect(response.headers.get('ratelimit-policy')).toBe('"partner";q=6;w=60');
        remaining.push(response.headers.get('ratelimit')!.match(/r=(\d+)/)![1]!);
      }
      expect(remaining).toEqual(['5', '4', '3', '2', '1', '0']);

      for (const replica of [first, second]) {
        const limited = await read(replica.baseUrl, key);
        expect(limited.status).toBe(429);
        expect(limited.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
        expect(await limited.json()).toMatchObject({ type: 'urn:partner-agent-status:problem:rate-limited', status: 429 });
      }
    } finally {
      await Promise.all([first.stop(), second.stop()]);
    }
  });
});
