// REDIS_WAIT_REPLICAS: a batch counts as paused in Redis only once a replica has its writes (WAIT),
// so that a failover to that replica keeps every `paused` the database then records. A real
// primary and a real replica (redis-server, REPLICAOF) on free ports; the replica is killed and
// started again.
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { freePort } from '../support/process.js';
import { killRedisServer, redisAdmin, spawnRedisServer } from '../support/redis-server.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
const key = newApiKey();
let primary: ChildProcess;
let replica: ChildProcess | undefined;
let primaryPort: number;
let replicaPort: number;
let admin: Redis;
let svc: TestService;
let networkId: string;

async function startReplica(): Promise<void> {
  replica = spawnRedisServer(replicaPort, '--replicaof', '127.0.0.1', String(primaryPort));
  const probe = redisAdmin(replicaPort);
  try {
    await vi.waitFor(async () => expect(await probe.info('replication')).toMatch(/master_link_status:up/), {
      timeout: 10_000,
      interval: 100,
    });
  } finally {
    probe.disconnect();
  }
}

beforeAll(async () => {
  primaryPort = await freePort();
  replicaPort = await freePort();
  primary = spawnRedisServer(primaryPort);
  admin = redisAdmin(primaryPort);
  await admin.ping(); // queued until the server listens
  await startReplica();
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'replicated' }],
    redisUrl: `redis://127.0.0.1:${primaryPort}`,
    env: {
      RATE_LIMIT_MAX: '0',
      REDIS_WAIT_REPLICAS: '1',
      REDIS_WAIT_TIMEOUT_MS: '200',
      BREAKER_RESET_TIMEOUT_MS: '300',
      WORKER_POLL_INTERVAL_MS: '200',
      WORKER_BACKOFF_MAX_MS: '500',
    },
  });
});

afterAll(async () => {
  await svc?.close();
  admin?.disconnect();
  for (const server of [replica, primary]) await killRedisServer(server);
  await db.close();
});

/** Read on the primary the service writes to, with the run's key prefix. */
async function pausedInPrimary(ids: readonly string[]): Promise<boolean[]> {
  const values = await Promise.all(ids.map((id) => admin.hget(`${inject('redisKeyPrefix')}campaign:${id}`, 'paused')));
  return values.map((value) => value === '1');
}

describe('REDIS_WAIT_REPLICAS=1', () => {
  it('pauses as usual while a replica acknowledges', async () => {
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 20);
    expect((await svc.setStatus(key, agentId, false)).statusCode).toBe(200);
    expect((await db.pausedIds(agentId)).size).toBe(20);
    expect(await pausedInPrimary(ids)).toEqual(ids.map(() => true));
  });

  it('marks nothing in the database while no replica acknowledges, and settles once one does', async () => {
    replica!.kill('SIGKILL');
    await once(replica!, 'exit');
    await vi.waitFor(async () => expect(await admin.info('replication')).toMatch(/connected_slaves:0/), { timeout: 10_000, interval: 100 });
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 20);
    const answer = await svc.setStatus(key, agentId, false);
    expect(answer.statusCode).toBe(500);
    expect(answer.json()).toMatchObject({ pausedCampaignCount: 0, remainingCampaignCount: 20 });
    expect((await db.pausedIds(agentId)).size).toBe(0);
    const { rows } = await db.pool.query('SELECT last_error FROM pending_disables WHERE agent_id = $1', [agentId]);
    expect(rows[0].last_error).toBe('redis:unavailable');

    await startReplica();
    await db.pendingDisableGone(agentId, 20_000, 100);
    expect((await db.pausedIds(agentId)).size).toBe(20);
    expect(await pausedInPrimary(ids)).toEqual(ids.map(() => true));
  });
});
