import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { expectPausedInDatabaseImpliesEverywhere, serviceStores } from '../support/agreement.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { startTestService, type TestService } from '../support/service.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

const db = testDatabase();
const key = newApiKey();
let networkId: string;
let svc: TestService;
let proxy: Awaited<ReturnType<typeof startTcpProxy>>;

beforeAll(async () => {
  networkId = await db.network();
  const redis = new URL(inject('redisUrl'));
  proxy = await startTcpProxy({ host: redis.hostname, port: Number(redis.port || 6379) });
  svc = await startTestService({
    partners: [{ key, networkId, name: 'faulty' }],
    redisUrl: proxy.url,
    // A small window so the breaker opens within a test; a short reset so it recovers within one.
    env: {
      BREAKER_VOLUME_THRESHOLD: '3',
      BREAKER_RESET_TIMEOUT_MS: '400',
      BREAKER_ROLLING_WINDOW_MS: '5000',
      SPEND_MANAGEMENT_TIMEOUT_MS: '300',
    },
  });
});

afterAll(async () => {
  await svc?.close();
  await proxy?.close();
  await db.close();
});

async function resetBreakers() {
  svc.service.breakers.spendManagement.close();
  svc.service.breakers.redis.close();
}

describe('spend management failing', () => {
  it('answers 500, keeps the agent disabled, pauses nothing in the database; a retry completes', async () => {
    await resetBreakers();
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 150);
    svc.sim.setMode('fail');

    const failed = await svc.setStatus(key, agentId, false);
    expect(failed.statusCode).toBe(500);
    expect(failed.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(failed.json()).toMatchObject({
      status: 500,
      title: 'Dependency failure',
      detail: expect.stringMatching(/The agent is disabled, and the service keeps pausing/),
      pausedCampaignCount: 0,
      remainingCampaignCount: 150,
    });
    expect(await db.agentApproved(agentId)).toBe(false);
    expect((await db.pausedIds(agentId)).size).toBe(0);
    expect(await svc.pausedInRedis(ids.slice(0, 5))).toEqual([false, false, false, false, false]);

    svc.sim.setMode('ok');
    const retried = await svc.setStatus(key, agentId, false);
    expect(retried.statusCode).toBe(200);
    expect(retried.json().pausedCampaignCount).toBe(150);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
  });

  it('stops after a batch fails midway: the batches before it are paused everywhere, the retry counts the rest', async () => {
    await resetBreakers();
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 250);
    svc.sim.setMode('fail', { failAfter: 1, failStatus: 502 });

    const failed = await svc.setStatus(key, agentId, false);
    expect(failed.statusCode).toBe(500);
    expect(failed.json()).toMatchObject({ pausedCampaignCount: 100, remainingCampaignCount: 150 });
    expect((await db.pausedIds(agentId)).size).toBe(100);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);

    // Two batches in flight failed together: that opens the breaker (tested on its own below).
    await resetBreakers();
    svc.sim.setMode('ok');
    const retried = await svc.setStatus(key, agentId, false);
    expect(retried.json().pausedCampaignCount).toBe(150);
    expect((await db.pausedIds(agentId)).size).toBe(250);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
  });

  it('answers 500 when spend management hangs, within the configured timeout', async () => {
    await resetBreakers();
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    svc.sim.setMode('hang');
    const started = Date.now();
    const failed = await svc.setStatus(key, agentId, false);
    // One attempt of SPEND_MANAGEMENT_TIMEOUT_MS (300 ms here): a time-out is never retried inside a call.
    expect(failed.statusCode).toBe(500);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect((await db.pausedIds(agentId)).size).toBe(0);

    svc.sim.setMode('ok');
    expect((await svc.setStatus(key, agentId, false)).json().pausedCampaignCount).toBe(3);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
  });
});

describe('Redis unreachable', () => {
  it('answers 500 without marking anything paused in the database, and recovers by itself', async () => {
    await resetBreakers();
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 20);
    proxy.cut();
    try {
      const failed = await svc.setStatus(key, agentId, false);
      expect(failed.statusCode).toBe(500);
      expect(await db.agentApproved(agentId)).toBe(false);
      expect((await db.pausedIds(agentId)).size).toBe(0);
    } finally {
      proxy.restore();
    }
    // ioredis reconnects in the background; the retry goes through once it has.
    let retried: Awaited<ReturnType<TestService['setStatus']>> | undefined;
    for (let attempt = 0; attempt < 50; attempt++) {
      retried = await svc.setStatus(key, agentId, false);
      if (retried.statusCode === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(retried!.statusCode).toBe(200);
    // The call counts what it moved itself (docs/interfaces.md §7): the worker, which finishes a
    // disable that answered 500 by itself, may have paused some or all of them first (on a busy
    // machine it did, before Redis was back for the retry). Between them, all 20, each once.
    expect(retried!.json().pausedCampaignCount).toBeLessThanOrEqual(20);
    expect((await db.pausedIds(agentId)).size).toBe(20);
    expect((await svc.pausedInRedis(ids)).every(Boolean)).toBe(true);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
  });
});

describe('the spend-management breaker', () => {
  it('opens after repeated failures, rejects without calling, then half-opens and closes on success', async () => {
    // A fresh instance: the breaker's rolling window must hold only this test's calls.
    const own = await startTestService({
      partners: [{ key, networkId, name: 'faulty' }],
      env: { BREAKER_VOLUME_THRESHOLD: '3', BREAKER_RESET_TIMEOUT_MS: '400', BREAKER_ROLLING_WINDOW_MS: '5000' },
    });
    try {
      const agentId = await db.agent(networkId);
      await db.campaigns(agentId, 2);
      own.sim.setMode('fail');
      for (let i = 0; i < 3; i++) expect((await own.setStatus(key, agentId, false)).statusCode).toBe(500);
      expect(own.service.breakers.spendManagement.opened).toBe(true);

      const callsWhileOpen = own.sim.requests().length;
      const rejected = await own.setStatus(key, agentId, false);
      expect(rejected.statusCode).toBe(500);
      expect(own.sim.requests().length).toBe(callsWhileOpen);
      const state = await own.service.metrics.registry.getSingleMetricAsString('circuit_breaker_state');
      expect(state).toMatch(/circuit_breaker_state\{breaker="spend_management"\} 2/);
      expect(
        own.logs.records().find((r) => r.requestId === rejected.headers['x-request-id'] && r.msg === 'dependency failure'),
      ).toMatchObject({ reason: 'breaker_open' });

      own.sim.setMode('ok');
      await new Promise((r) => setTimeout(r, 450));
      const recovered = await own.setStatus(key, agentId, false);
      expect(recovered.statusCode).toBe(200);
      expect(recovered.json().pausedCampaignCount).toBe(2);
      expect(own.service.breakers.spendManagement.closed).toBe(true);
      expect(await own.service.metrics.registry.getSingleMetricAsString('circuit_breaker_state')).toMatch(
        /circuit_breaker_state\{breaker="spend_management"\} 0/,
      );
    } finally {
      await own.close();
    }
  });
});

describe('concurrent disables of one agent', () => {
  it('count each campaign exactly once across 20 requests on two instances', async () => {
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 300);
    const first = await startTestService({ partners: [{ key, networkId, name: 'concurrent' }] });
    const second = await startTestService({ partners: [{ key, networkId, name: 'concurrent' }], simulator: first.simulator });
    try {
      const requests = Array.from({ length: 20 }, (_, i) => (i % 2 ? second : first).setStatus(key, agentId, false));
      const responses = await Promise.all(requests);
      expect(responses.map((r) => r.statusCode)).toEqual(Array(20).fill(200));
      const total = responses.reduce((sum, r) => sum + r.json().pausedCampaignCount, 0);
      expect(total).toBe(300);
      expect((await db.pausedIds(agentId)).size).toBe(ids.length);
      expect(ids.every((id) => first.sim.isPaused(id))).toBe(true);
      expect((await first.pausedInRedis(ids)).every(Boolean)).toBe(true);
    } finally {
      await second.close();
      await first.close();
    }
  });
});

describe('PostgreSQL unreachable', () => {
  it('turns /readyz to 503 and disables to 500, and both recover by themselves', async () => {
    const database = new URL(databaseUrl());
    const pgProxy = await startTcpProxy({ host: database.hostname, port: Number(database.port || 5432) });
    database.host = `127.0.0.1:${pgProxy.port}`;
    const own = await startTestService({ partners: [{ key, networkId, name: 'faulty' }], env: { DATABASE_URL: database.toString() } });
    try {
      const agentId = await db.agent(networkId);
      expect((await own.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
      pgProxy.cut();
      expect((await own.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
      const failed = await own.setStatus(key, agentId, false);
      expect(failed.statusCode).toBe(500);
      expect(failed.json().detail).toMatch(/The database did not answer/);
      // Classified, in the log line and the metric: the connection, not the statement, failed.
      const logged = own.logs.records().find((r) => r.requestId === failed.headers['x-request-id'] && r.msg === 'dependency failure');
      expect(logged).toMatchObject({ dependency: 'postgres', reason: expect.stringMatching(/^(unavailable|timeout)$/) });
      expect(await own.service.metrics.registry.getSingleMetricAsString('dependency_errors_total')).toMatch(
        /dependency_errors_total\{dependency="postgres",reason="(unavailable|timeout)"\} [1-9]/,
      );
      pgProxy.restore();
      let ready = 0;
      for (let attempt = 0; attempt < 50 && ready !== 200; attempt++) {
        ready = (await own.app.inject({ method: 'GET', url: '/readyz' })).statusCode;
        if (ready !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      expect(ready).toBe(200);
    } finally {
      pgProxy.restore();
      await own.close();
      await pgProxy.close();
    }
  });
});
