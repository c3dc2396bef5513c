// A Redis that refuses writes as a whole (a demoted primary after a failover: READONLY) is a
// failure of Redis, not of single campaigns: the breaker counts it, the client reconnects, and the
// disable converges once Redis takes writes again. A real redis-server on a free port is made a
// replica of nothing with REPLICAOF, as a failover leaves an old primary.
import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { freePort } from '../support/process.js';
import { killRedisServer, redisAdmin, spawnRedisServer } from '../support/redis-server.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
const key = newApiKey();
let server: ChildProcess;
let admin: Redis;
let port: number;
let svc: TestService;
let networkId: string;

beforeAll(async () => {
  port = await freePort();
  server = spawnRedisServer(port);
  admin = redisAdmin(port);
  await admin.ping(); // queued until the server listens
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'read-only' }],
    redisUrl: `redis://127.0.0.1:${port}`,
    env: { RATE_LIMIT_MAX: '0', BREAKER_RESET_TIMEOUT_MS: '300', WORKER_POLL_INTERVAL_MS: '200', WORKER_BACKOFF_MAX_MS: '500' },
  });
});

afterAll(async () => {
  await svc?.close();
  admin?.disconnect();
  await killRedisServer(server);
  await db.close();
});

describe('Redis turned read-only (REPLICAOF)', () => {
  it('is a Redis failure that opens the breaker; once Redis is primary again the disable converges with no request', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 20);
    const unused = await freePort();
    await admin.replicaof('127.0.0.1', unused);
    expect((await admin.call('ROLE')) as unknown[]).toContain('slave');

    const answer = await svc.setStatus(key, agentId, false);
    expect(answer.statusCode).toBe(500);
    expect(answer.json()).toMatchObject({ pausedCampaignCount: 0, remainingCampaignCount: 20 });
    const errors = await svc.service.metrics.registry.getSingleMetricAsString('dependency_errors_total');
    expect(errors).toMatch(/dependency="redis",reason="unavailable"\} [1-9]/);
    const refusals = await svc.service.metrics.registry.getSingleMetricAsString('campaigns_not_confirmed_total');
    expect(refusals).toMatch(/dependency="redis"\} 0/);
    const { rows } = await db.pool.query('SELECT last_error FROM pending_disables WHERE agent_id = $1', [agentId]);
    expect(rows[0].last_error).toBe('redis:unavailable');

    // Five failed calls in a row open the breaker, whatever came before.
    for (let i = 0; i < 5 && !svc.service.breakers.redis.opened; i += 1) await svc.setStatus(key, agentId, false);
    expect(svc.service.breakers.redis.opened).toBe(true);

    await admin.replicaof('NO', 'ONE');
    // The disable converges after Redis took writes again.
    await db.pendingDisableGone(agentId, 15_000, 100);
    expect((await db.pausedIds(agentId)).size).toBe(20);
  });
});
