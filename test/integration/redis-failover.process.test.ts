// A Redis failover with the chart's defaults (REDIS_WAIT_REPLICAS=connected, REDIS_WAIT_TIMEOUT_MS
// 100): "paused in PostgreSQL implies paused in Redis" holds on the promoted replica, and a primary
// without replicas does not stop disables. Real redis-server processes: a primary, and a replica
// whose replication link runs through a TCP proxy (delayed: a lagging replica; cut: a replica that
// dropped out); the built service (as `npm start` runs it) reaches Redis through another proxy,
// retargeted at the failover.
import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { postStatus } from '../support/partner.js';
import { freePort } from '../support/process.js';
import { type processEnvironment, startServingProcess } from '../support/process-environment.js';
import { killRedisServer, redisAdmin, spawnRedisServer } from '../support/redis-server.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

const db = testDatabase();
const key = newApiKey();
let primary: ChildProcess | undefined;
let replica: ChildProcess | undefined;
let primaryPort: number;
let replicaPort: number;
let replicaAdmin: Redis;
let link: Awaited<ReturnType<typeof startTcpProxy>>;
let front: Awaited<ReturnType<typeof startTcpProxy>>;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let service: Awaited<ReturnType<typeof startServingProcess>>['service'];
let networkId: string;

beforeAll(async () => {
  primaryPort = await freePort();
  replicaPort = await freePort();
  primary = spawnRedisServer(primaryPort);
  const primaryAdmin = redisAdmin(primaryPort);
  await primaryAdmin.ping(); // queued until the server listens
  primaryAdmin.disconnect();
  link = await startTcpProxy({ host: '127.0.0.1', port: primaryPort });
  replica = spawnRedisServer(replicaPort, '--replicaof', '127.0.0.1', String(link.port));
  replicaAdmin = redisAdmin(replicaPort);
  await vi.waitFor(async () => expect(await replicaAdmin.info('replication')).toMatch(/master_link_status:up/), {
    timeout: 10_000,
    interval: 100,
  });
  front = await startTcpProxy({ host: '127.0.0.1', port: primaryPort });
  networkId = await db.network();
  // The chart's Redis settings are the service's defaults: none set here. Short breaker and worker
  // pauses keep the test quick.
  ({ environment, service } = await startServingProcess({ key, networkId, name: 'failover' }, await db.agent(networkId), {
    REDIS_URL: front.url,
    RATE_LIMIT_MAX: '0',
    BREAKER_RESET_TIMEOUT_MS: '300',
    WORKER_POLL_INTERVAL_MS: '200',
    WORKER_BACKOFF_MAX_MS: '500',
  }));
});

afterAll(async () => {
  await service?.stop();
  await environment?.close();
  replicaAdmin?.disconnect();
  await front?.close();
  await link?.close();
  for (const server of [replica, primary]) await killRedisServer(server);
  await db.close();
});

/** The campaigns of `ids` that the replica's data (the test's key prefix) says are paused. */
async function pausedInReplica(ids: readonly string[]): Promise<number> {
  const values = await Promise.all(ids.map((id) => replicaAdmin.hget(`${inject('redisKeyPrefix')}campaign:${id}`, 'paused')));
  return values.filter((value) => value === '1').length;
}

/** A disable over HTTP to the built service: its status. */
async function disable(agentId: string): Promise<number> {
  const response = await postStatus(service.baseUrl, key, agentId, false);
  await response.arrayBuffer();
  return response.status;
}

/** One series of the service's metrics, as its exposition lines. */
async function metric(name: string): Promise<string> {
  const text = await (await fetch(`${service.metricsUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(name))
    .join('\n');
}

/**
 * Waits until the primary has `count` replicas connected and the service has seen it (its
 * redis_wait_replicas gauge; it asks the primary once a second).
 */
async function waitsForReplicas(count: number): Promise<void> {
  const primaryAdmin = redisAdmin(primaryPort);
  try {
    await vi.waitFor(
      async () => {
        expect(await primaryAdmin.info('replication')).toMatch(new RegExp(`connected_slaves:${count}\\b`));
        const gauge = await metric('redis_wait_replicas ');
        if (gauge) expect(gauge).toBe(`redis_wait_replicas ${count}`);
      },
      { timeout: 10_000, interval: 100 },
    );
  } finally {
    primaryAdmin.disconnect();
  }
}

describe('a Redis failover to a lagging replica, with the chart defaults', () => {
  it('keeps every campaign paused in PostgreSQL paused in Redis on the promoted replica, and disables go on without replicas', {
    timeout: 90_000,
  }, async () => {
    // A replica in step: a disable's batches wait for it.
    await waitsForReplicas(1);
    const inStep = await db.agent(networkId);
    const inStepIds = await db.campaigns(inStep, 20);
    expect(await disable(inStep)).toBe(200);
    expect(await pausedInReplica(inStepIds)).toBe(20);

    // The replica lags (its stream held back, still connected): nothing is marked paused in the
    // database that the replica does not have.
    link.delay(120_000);
    const lagging = await db.agent(networkId);
    const laggingIds = await db.campaigns(lagging, 20);
    expect(await disable(lagging)).toBe(500);
    expect((await db.pausedIds(lagging)).size).toBe(0);

    // The replica drops out: the primary has none, and disables finish without WAIT (the one held
    // back above, by the worker, and a new one).
    link.cut();
    await waitsForReplicas(0);
    await db.pendingDisableGone(lagging, 20_000, 100);
    const alone = await db.agent(networkId);
    const aloneIds = await db.campaigns(alone, 20);
    expect(await disable(alone)).toBe(200);
    expect(await pausedInReplica([...laggingIds, ...aloneIds])).toBe(0);

    // The failover: the replica promoted, the service's address moved to it, the primary killed.
    await replicaAdmin.replicaof('NO', 'ONE');
    front.retarget(replicaPort);
    await killRedisServer(primary);
    primary = undefined;

    // What the database records as paused is paused in Redis again, on the new primary.
    await vi.waitFor(
      async () => {
        for (const [agentId, ids] of [
          [inStep, inStepIds],
          [lagging, laggingIds],
          [alone, aloneIds],
        ] as const) {
          const paused = await db.pausedIds(agentId);
          expect(paused.size).toBe(20);
          expect(await pausedInReplica([...paused])).toBe(ids.length);
        }
      },
      { timeout: 20_000, interval: 200 },
    );
    // Counted once the pass has marked every agent: the marks above can be seen a moment before.
    await vi.waitFor(
      async () => expect(await metric('redis_failover_reasserts_total')).toMatch(/redis_failover_reasserts_total\{outcome="ok"\} [1-9]/),
      { timeout: 5_000, interval: 100 },
    );

    // The new primary has no replica: disables go on.
    const after = await db.agent(networkId);
    const afterIds = await db.campaigns(after, 20);
    await vi.waitFor(async () => expect(await disable(after)).toBe(200), { timeout: 10_000, interval: 500 });
    expect(await pausedInReplica(afterIds)).toBe(20);
  });
});
