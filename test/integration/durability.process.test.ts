import { once } from 'node:events';
import { connect } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { expectPausedInDatabaseImpliesEverywhere, standings } from '../support/agreement.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { postStatus } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';

// docs/interfaces.md §7 and §9 at the level of whole processes: the built service (as `npm start`
// runs it) killed, drained and run twice over one database, against the real PostgreSQL and Redis
// and the spend-management simulator running in this test process.
const db = testDatabase();
const key = newApiKey();
let sim: SpendSimulator['simulator'];
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let redis: Redis;
let networkId: string;
let baseEnv: Record<string, string>;

type ServiceProcess = Awaited<ReturnType<typeof startServiceProcess>>;

beforeAll(async () => {
  redis = new Redis(inject('redisUrl'), { keyPrefix: inject('redisKeyPrefix'), lazyConnect: true });
  await redis.connect();
  networkId = await db.network();
  environment = await processEnvironment(
    [{ key, networkId, name: 'durability-partner' }],
    {
      OTEL_SDK_DISABLED: 'true',
      DRAIN_DELAY_MS: '0',
      RATE_LIMIT_MAX: '0',
      // Quick hand-overs: a dead replica's claim runs out after 2 s, workers look every ~200 ms.
      WORKER_LEASE_MS: '2000',
      WORKER_POLL_INTERVAL_MS: '200',
      // Below the lease by the client's margin (1.5 s), as the configuration requires.
      DATABASE_STATEMENT_TIMEOUT_MS: '450',
    },
    { keepRequests: 20_000 },
  );
  sim = environment.simulator.simulator;
  baseEnv = environment.env;
});

afterAll(async () => {
  await environment?.close();
  redis.disconnect();
  await db.close();
});

/**
 * The three stores' view of the agent's campaigns, after checking docs/interfaces.md §7's
 * invariant: a campaign paused in the database is paused in Redis and in spend management.
 */
async function storesAgree(agentId: string, ids: readonly string[]) {
  const stores = { pool: db.pool, redis, isPausedInSpendManagement: (id: string) => sim.isPaused(id) };
  const inDatabase = await db.pausedIds(agentId);
  await expectPausedInDatabaseImpliesEverywhere(stores, [...inDatabase]);
  const standing = await standings(stores, ids);
  const pausedIn = (store: 'redis' | 'spendManagement') => new Set(standing.filter((c) => c[store]).map((c) => c.campaignId));
  return { inDatabase, inRedis: pausedIn('redis'), inSpendManagement: pausedIn('spendManagement') };
}

/** Pause calls the simulator received for these campaigns, from index `from` of its log on. */
function callsFor(ids: readonly string[], from = 0) {
  const mine = new Set(ids);
  return sim
    .requests()
    .slice(from)
    .filter((call) => call.campaignIds.some((id) => mine.has(id)));
}

/** The convergence worker's attempt lines of one process for one agent. */
function workerAttempts(service: ServiceProcess, agentId: string) {
  return service.output.flatMap((line) => {
    try {
      const entry = JSON.parse(line) as { msg?: string; agentId?: string; outcome?: string; pausedCampaignCount?: number };
      return entry.agentId === agentId && entry.msg?.startsWith('pending disable attempt') ? [entry] : [];
    } catch {
      return [];
    }
  });
}

async function counter(service: ServiceProcess, series: string): Promise<number> {
  const text = await (await fetch(`${service.metricsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

/** Stops what is still running; a process that already exited is left alone. */
async function stopAll(services: Array<ServiceProcess | undefined>): Promise<void> {
  await Promise.all(services.map((service) => service?.stop()));
}

/**
 * Seeds an agent with 1,500 campaigns, makes spend management slow, starts a process and sends
 * it a disable; resolves once spend management has seen `calls` of that disable's pause calls.
 */
async function longDisableUnderWay(env: Record<string, string>, delayMs: number, calls: number, signal?: AbortSignal) {
  const agentId = await db.agent(networkId);
  const ids = await db.campaigns(agentId, 1_500);
  sim.setMode('slow', { delayMs });
  const service = await startServiceProcess(env);
  const before = sim.requests().length;
  const request = postStatus(service.baseUrl, key, agentId, false, { signal }).catch((error: Error) => error);
  await vi.waitFor(() => expect(callsFor(ids, before).length).toBeGreaterThanOrEqual(calls), { timeout: 30_000, interval: 10 });
  return { agentId, ids, service, request };
}

/** Every campaign of the agent is paused in the database, Redis and spend management. */
async function expectAllPaused(agentId: string, ids: readonly string[]): Promise<void> {
  const stores = await storesAgree(agentId, ids);
  expect(stores.inDatabase).toEqual(new Set(ids));
  expect(stores.inRedis).toEqual(new Set(ids));
  expect(stores.inSpendManagement).toEqual(new Set(ids));
}

describe('SIGKILL in the middle of a long disable', () => {
  it('leaves the stores consistent, and the restarted process finishes the disable with no further request', {
    timeout: 180_000,
  }, async () => {
    const env = { ...baseEnv, DISABLE_BATCHES_IN_FLIGHT: '1' };
    let first: ServiceProcess | undefined;
    let second: ServiceProcess | undefined;
    try {
      // Several batches in: some campaigns are paused everywhere, one batch is on its way.
      const underWay = await longDisableUnderWay(env, 150, 3);
      const { agentId, ids, request } = underWay;
      first = underWay.service;
      first.child.kill('SIGKILL');
      expect(await first.exited).toBeNull();
      expect(first.child.signalCode).toBe('SIGKILL');
      expect(await request).toBeInstanceOf(Error); // the connection died with the process
      // A statement the process had sent may still commit on the server after its death (a backend
      // finishes its statement before it notices the closed socket): let the server settle first.
      await db.quiet();

      // At the kill point: paused in the database implies paused everywhere, and the dead
      // process still holds the claim.
      const atKill = await storesAgree(agentId, ids);
      expect(atKill.inDatabase.size).toBeGreaterThan(0);
      expect(atKill.inDatabase.size).toBeLessThan(ids.length);
      // Claimed, never released with a failure. Its attempts may be 2 on a busy machine: a mark that
      // came later than the 2 s lease let the process's own worker take its request's run over.
      const orphan = await db.pendingDisable(agentId);
      expect(orphan).toMatchObject({ last_error: null });
      expect(orphan!.claim_token).not.toBeNull();
      expect(orphan!.lease_owner).not.toBeNull();

      // A new process, and no request: its worker takes the claim over once the lease ran out.
      second = await startServiceProcess(env);
      await db.pendingDisableGone(agentId, 60_000);

      await expectAllPaused(agentId, ids);
      expect(await db.agentApproved(agentId)).toBe(false);
      expect(await db.changeStates(agentId)).toEqual([false]); // one request, nothing more
      // The second process moved exactly what the first had not committed: its worker's run, and
      // the batch the first had on its way, settled from the write-ahead record (both counted in
      // campaigns_paused_total), nothing twice.
      await vi.waitFor(() => expect(workerAttempts(second!, agentId).some((a) => a.outcome === 'completed')).toBe(true), {
        timeout: 10_000,
        interval: 50,
      });
      await vi.waitFor(
        async () =>
          expect(await counter(second!, 'campaigns_paused_total{partner="durability-partner"}')).toBe(ids.length - atKill.inDatabase.size),
        { timeout: 10_000, interval: 100 },
      );
    } finally {
      sim.setMode('ok');
      await stopAll([first, second]);
    }
  });
});

describe('two processes on one database converge one failed disable', () => {
  it('completes the pending row once, pausing each campaign in exactly one successful call', { timeout: 180_000 }, async () => {
    const env = {
      ...baseEnv,
      DISABLE_BATCHES_IN_FLIGHT: '1',
      WORKER_BACKOFF_BASE_MS: '200',
      WORKER_BACKOFF_MAX_MS: '1000',
      BREAKER_RESET_TIMEOUT_MS: '500',
    };
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 600);
    let a: ServiceProcess | undefined;
    let b: ServiceProcess | undefined;
    try {
      [a, b] = await Promise.all([startServiceProcess(env), startServiceProcess(env)]);
      sim.setMode('fail', { failStatus: 503 });
      const response = await postStatus(a.baseUrl, key, agentId, false);
      expect(response.status).toBe(500);
      expect(await response.json()).toMatchObject({
        type: 'urn:partner-agent-status:problem:dependency-failure',
        pausedCampaignCount: 0,
        remainingCampaignCount: ids.length,
      });

      // While spend management fails, both replicas' workers take their turns at the row.
      await vi.waitFor(
        () => {
          expect(workerAttempts(a!, agentId).some((x) => x.outcome === 'failed')).toBe(true);
          expect(workerAttempts(b!, agentId).some((x) => x.outcome === 'failed')).toBe(true);
        },
        { timeout: 60_000, interval: 50 },
      );
      const failing = await db.pendingDisable(agentId);
      expect(failing!.attempts).toBeGreaterThanOrEqual(3); // the request's own, then one per worker attempt at least
      expect(failing!.last_error).toMatch(/^spend_management:/);
      expect(failing!.last_error).not.toContain(key);

      // Spend management recovers, slowly enough that a run spans several polls of both workers.
      const switchedAt = sim.requests().length;
      sim.setMode('slow', { delayMs: 200 });
      await db.pendingDisableGone(agentId, 60_000);

      const successful = callsFor(ids, switchedAt);
      const timesPaused = new Map<string, number>();
      for (const call of successful) for (const id of call.campaignIds) timesPaused.set(id, (timesPaused.get(id) ?? 0) + 1);
      expect(
        [...timesPaused.entries()].filter(([, n]) => n !== 1),
        'campaigns paused more than once',
      ).toEqual([]);
      expect(new Set(timesPaused.keys())).toEqual(new Set(ids));

      await expectAllPaused(agentId, ids);
      expect(await db.changeStates(agentId)).toEqual([false]);
      // Exactly one attempt, on one of the two replicas, completed it; none lost its claim.
      const completed = `disable_worker_attempts_total{outcome="completed"}`;
      const superseded = `disable_worker_attempts_total{outcome="superseded"}`;
      expect((await counter(a, completed)) + (await counter(b, completed))).toBe(1);
      expect((await counter(a, superseded)) + (await counter(b, superseded))).toBe(0);
    } finally {
      sim.setMode('ok');
      await stopAll([a, b]);
    }
  });
});

describe('SIGTERM with a disable in flight whose client has gone', () => {
  it('exits 0 within the shutdown bound, leaves the row released and consistent, and a new process finishes it', {
    timeout: 180_000,
  }, async () => {
    const shutdownTimeoutMs = 3_000;
    const env = { ...baseEnv, DISABLE_BATCHES_IN_FLIGHT: '1', SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) };
    let first: ServiceProcess | undefined;
    let second: ServiceProcess | undefined;
    try {
      const client = new AbortController();
      const underWay = await longDisableUnderWay(env, 300, 2, client.signal);
      const { agentId, ids, request } = underWay;
      first = underWay.service;
      client.abort();
      expect(await request).toMatchObject({ name: 'AbortError' });

      const termAt = Date.now();
      first.child.kill('SIGTERM');
      // Soft, so that a shutdown that fails its bound still shows what it left behind below.
      expect.soft(await first.exited, first.output.join('\n')).toBe(0);
      expect.soft(Date.now() - termAt).toBeLessThan(shutdownTimeoutMs + 2_000);

      // Stopped between batches and handed back: no claim, due at once for any replica.
      const row = await db.pendingDisable(agentId);
      expect(row).toMatchObject({ claim_token: null, lease_owner: null, due: true });
      const atExit = await storesAgree(agentId, ids);
      expect(atExit.inDatabase.size).toBeGreaterThan(0);
      expect(atExit.inDatabase.size).toBeLessThan(ids.length);
      expect.soft(first.output.some((line) => line.includes('"msg":"closed"'))).toBe(true);

      sim.setMode('ok');
      second = await startServiceProcess(env);
      await db.pendingDisableGone(agentId, 60_000);
      await expectAllPaused(agentId, ids);
      expect(await db.changeStates(agentId)).toEqual([false]);
    } finally {
      sim.setMode('ok');
      await stopAll([first, second]);
    }
  });

  it('is not held up by a connection that never sent a request', { timeout: 60_000 }, async () => {
    // What a client such as undici's fetch leaves behind after an aborted request (it opens a
    // fresh pooled connection), or a load balancer's pre-opened connection.
    const shutdownTimeoutMs = 3_000;
    const service = await startServiceProcess({ ...baseEnv, SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) });
    const socket = connect(Number(new URL(service.baseUrl).port), '127.0.0.1');
    socket.on('error', () => undefined);
    try {
      await once(socket, 'connect');
      const termAt = Date.now();
      service.child.kill('SIGTERM');
      expect(await service.exited, service.output.join('\n')).toBe(0);
      expect(Date.now() - termAt).toBeLessThan(shutdownTimeoutMs + 2_000);
    } finally {
      socket.destroy();
      await service.stop();
    }
  });
});

describe('an enable on one process stops a disable running on another', () => {
  it('answers the disable 409, sends no new pause call after the enable answered, and leaves the stores in agreement', {
    timeout: 180_000,
  }, async () => {
    const batchesInFlight = 2;
    const env = { ...baseEnv, DISABLE_BATCHES_IN_FLIGHT: String(batchesInFlight) };
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 1_500);
    let a: ServiceProcess | undefined;
    let b: ServiceProcess | undefined;
    try {
      [a, b] = await Promise.all([startServiceProcess(env), startServiceProcess(env)]);
      sim.setMode('slow', { delayMs: 300 });
      const before = sim.requests().length;
      const disabling = postStatus(a.baseUrl, key, agentId, false);
      await vi.waitFor(() => expect(callsFor(ids, before).length).toBeGreaterThanOrEqual(1), { timeout: 30_000, interval: 10 });

      const enabled = await postStatus(b.baseUrl, key, agentId, true);
      const enabledAt = sim.requests().length;
      expect(enabled.status).toBe(200);
      expect(await enabled.json()).toMatchObject({ agentId, enabled: true, pausedCampaignCount: 0 });

      const response = await disabling;
      expect(response.status).toBe(409);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const problem = (await response.json()) as { type: string; pausedCampaignCount: unknown };
      expect(problem.type).toBe('urn:partner-agent-status:problem:superseded');
      expect(Number.isInteger(problem.pausedCampaignCount)).toBe(true);

      // Only batches A had already started may still reach spend management.
      expect(callsFor(ids, enabledAt).length).toBeLessThanOrEqual(batchesInFlight);
      const stores = await storesAgree(agentId, ids);
      // A batch sent to spend management is completed in Redis and the database.
      expect(stores.inRedis).toEqual(stores.inSpendManagement);
      expect(stores.inDatabase).toEqual(stores.inSpendManagement);
      expect(stores.inDatabase.size).toBe(problem.pausedCampaignCount);
      expect(stores.inDatabase.size).toBeLessThan(ids.length);
      expect(await db.agentApproved(agentId)).toBe(true);
      expect(await db.pendingDisable(agentId)).toBeUndefined();
      expect(await db.changeStates(agentId)).toEqual([false, true]);
    } finally {
      sim.setMode('ok');
      await stopAll([a, b]);
    }
  });
});
