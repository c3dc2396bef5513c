// What a disable has sent is recorded before it is sent, and settled whatever becomes of the run,
// its claim, the disable or the process (docs/interfaces.md §9): the built service (as `npm start`
// runs it) against the real PostgreSQL and Redis, with TCP proxies that cut Redis, cut or slow the
// database, and SIGTERM and SIGKILL of real processes. Each test ends with the three stores agreeing
// on every campaign, both ways.
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { disagreements } from '../support/agreement.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { postStatus } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { patience } from '../support/wait.js';

const db = testDatabase();
const key = newApiKey();
const otherKey = newApiKey();
let sim: SpendSimulator['simulator'];
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let redis: Redis;
let networkId: string;
let otherNetworkId: string;
const replicas: Array<Awaited<ReturnType<typeof startServiceProcess>>> = [];

beforeAll(async () => {
  redis = new Redis(inject('redisUrl'), { keyPrefix: inject('redisKeyPrefix'), lazyConnect: true });
  await redis.connect();
  networkId = await db.network();
  otherNetworkId = await db.network();
  environment = await processEnvironment(
    [
      { key, networkId, name: 'write-ahead-partner' },
      { key: otherKey, networkId: otherNetworkId, name: 'busy-partner' },
    ],
    {
      OTEL_SDK_DISABLED: 'true',
      DRAIN_DELAY_MS: '0',
      RATE_LIMIT_MAX: '0',
      // Quick hand-overs: a claim or a record runs out after 2 s, workers look every ~200 ms.
      WORKER_LEASE_MS: '2000',
      WORKER_POLL_INTERVAL_MS: '200',
      WORKER_BACKOFF_BASE_MS: '100',
      WORKER_BACKOFF_MAX_MS: '500',
      DATABASE_STATEMENT_TIMEOUT_MS: '450',
      REDIS_COMMAND_TIMEOUT_MS: '300',
      SPEND_MANAGEMENT_TIMEOUT_MS: '4000',
      BREAKER_RESET_TIMEOUT_MS: '500',
    },
    { keepRequests: 20_000 },
  );
  sim = environment.simulator.simulator;
});

// Each test's replicas stop with it, once they have settled its work: kept to the end of the file,
// the 15 of its tests held up to 69 of PostgreSQL's 100 connections (their loops keep their pools
// warm), and a second test suite on the same machine then met "too many clients" (issue 37).
// Stopped at once, they left their calls unsettled for the next test's replicas, whose own waits
// (unsettled_campaigns 0) then timed out on a busy machine. Bounded: what does not settle is left
// to the next replicas, as before.
afterEach(async () => {
  const running = replicas.splice(0);
  const deadline = performance.now() + patience(30_000);
  while (performance.now() < deadline && running.some((replica) => replica.child.exitCode === null)) {
    const { rows } = await db.pool.query(
      'SELECT (SELECT count(*) FROM pause_calls)::int + (SELECT count(*) FROM pending_disables)::int AS n',
    );
    if (rows[0].n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await Promise.all(running.map((replica) => replica.stop()));
});

afterAll(async () => {
  await Promise.all(replicas.map((replica) => replica.stop()));
  await environment?.close();
  redis.disconnect();
  await db.close();
});

async function replica(env: Record<string, string> = {}) {
  const started = await startServiceProcess({ ...environment.env, ...env });
  replicas.push(started);
  return started;
}

const stores = () => ({ pool: db.pool, redis, isPausedInSpendManagement: (id: string) => sim.isPaused(id) });

/** Waits (bounded) until the three stores agree on every campaign of `ids`; returns how many are paused. */
async function agreeInTheEnd(ids: readonly string[], timeout = patience(30_000)): Promise<number> {
  await vi.waitFor(async () => expect(await disagreements(stores(), ids)).toEqual([]), { timeout, interval: 250 });
  return ids.filter((id) => sim.isPaused(id)).length;
}

const redisTarget = () => {
  const url = new URL(inject('redisUrl'));
  return { host: url.hostname, port: Number(url.port || 6379) };
};
const databaseTarget = () => {
  const url = new URL(databaseUrl());
  return { host: url.hostname, port: Number(url.port || 5432) };
};
const through = (proxyPort: number) => {
  const url = new URL(databaseUrl());
  url.port = String(proxyPort);
  return url.toString();
};

describe('a Redis outage under a disable, then an enable', () => {
  it('leaves no campaign paused in spend management alone: Redis and the database follow once Redis is back', {
    timeout: patience(60_000),
  }, async () => {
    sim.setMode('ok');
    const proxy = await startTcpProxy(redisTarget());
    try {
      const service = await replica({ REDIS_URL: proxy.url });
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 300);
      proxy.cut();
      const disable = await postStatus(service.baseUrl, key, agentId, false);
      expect(disable.status).toBe(500);
      expect(ids.some((id) => sim.isPaused(id))).toBe(true);
      const enable = await postStatus(service.baseUrl, key, agentId, true);
      expect(enable.status).toBe(200);
      expect(await db.agentApproved(agentId)).toBe(true);
      proxy.restore();
      const paused = await agreeInTheEnd(ids);
      expect(paused).toBeGreaterThan(0);
      // The records are settled by the worker after the stores agree (on a busy machine, seconds after).
      await workersSettled(service);
      await recordEmpty(agentId);
    } finally {
      await proxy.close();
    }
  });
});

describe('a database cut while a call is in flight, then an enable', () => {
  it('settles the batch spend management confirmed, in Redis and the database, once the database is back', {
    timeout: patience(60_000),
  }, async () => {
    const proxy = await startTcpProxy(databaseTarget());
    try {
      const service = await replica({ DATABASE_URL: through(proxy.port) });
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 100);
      sim.setMode('slow', { delayMs: 1_000 });
      const requestsBefore = sim.requests().length;
      const disable = postStatus(service.baseUrl, key, agentId, false);
      await vi.waitFor(() => expect(sim.requests().length).toBeGreaterThan(requestsBefore), { timeout: patience(5_000), interval: 20 });
      proxy.cut();
      expect((await disable).status).toBe(500);
      sim.setMode('ok');
      proxy.restore();
      await vi.waitFor(async () => expect((await postStatus(service.baseUrl, key, agentId, true)).status).toBe(200), {
        timeout: patience(10_000),
        interval: 250,
      });
      expect(await agreeInTheEnd(ids)).toBe(100);
    } finally {
      sim.setMode('ok');
      await proxy.close();
    }
  });
});

describe('a replica stopped while what it sent is not settled', () => {
  it('SIGTERM during a Redis outage: another replica settles the superseded batch', { timeout: patience(60_000) }, async () => {
    const proxy = await startTcpProxy(redisTarget());
    try {
      const first = await replica({ REDIS_URL: proxy.url });
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 100);
      sim.setMode('slow', { delayMs: 2_500 });
      const requestsBefore = sim.requests().length;
      const disable = postStatus(first.baseUrl, key, agentId, false);
      await vi.waitFor(() => expect(sim.requests().length).toBeGreaterThan(requestsBefore), { timeout: patience(5_000), interval: 20 });
      expect((await postStatus(first.baseUrl, key, agentId, true)).status).toBe(200);
      proxy.cut(); // Redis unreachable when the confirmed batch comes back
      expect((await disable).status).toBe(409);
      sim.setMode('ok');
      expect(ids.every((id) => sim.isPaused(id))).toBe(true);
      first.child.kill('SIGTERM');
      expect(await first.exited).toBe(0);
      proxy.restore();
      await replica();
      expect(await agreeInTheEnd(ids)).toBe(100);
      expect(await db.agentApproved(agentId)).toBe(true);
    } finally {
      sim.setMode('ok');
      await proxy.close();
    }
  });

  it('SIGKILL while a call is in flight: another replica sends the same call again (same key), and the stores agree', {
    timeout: patience(60_000),
  }, async () => {
    // A lease that outlasts the second replica's start: the enable below comes while the dead
    // replica's claim still holds, so no worker runs the disable again under new keys first, and
    // what settles the batch is the record (due when its lease runs out).
    const first = await replica({ WORKER_LEASE_MS: '6000' });
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 100);
    sim.setMode('slow', { delayMs: 1_500 });
    const requestsBefore = sim.requests().length;
    const disable = postStatus(first.baseUrl, key, agentId, false).catch(() => undefined);
    await vi.waitFor(() => expect(sim.requests().length).toBeGreaterThan(requestsBefore), { timeout: patience(5_000), interval: 20 });
    const callKey = sim.requests().at(-1)!.idempotencyKey;
    first.child.kill('SIGKILL');
    await first.exited;
    await disable;
    // The call reached spend management, which paused the campaigns; nothing else knows yet.
    await vi.waitFor(() => expect(ids.every((id) => sim.isPaused(id))).toBe(true), { timeout: patience(5_000), interval: 50 });
    sim.setMode('ok');
    const second = await replica();
    expect((await postStatus(second.baseUrl, key, agentId, true)).status).toBe(200);
    expect(await agreeInTheEnd(ids)).toBe(100);
    const again = sim.requests().filter((request) => request.idempotencyKey === callKey);
    expect(again.length).toBeGreaterThanOrEqual(2);
    expect(again.slice(1).every((request) => request.replay)).toBe(true);
  });
});

describe("a replica whose database answers come late, and another replica's enable", () => {
  it('starts no pause call after the enable answered: a claim check answered too late is not trusted', {
    timeout: patience(60_000),
  }, async () => {
    const proxy = await startTcpProxy(databaseTarget());
    try {
      const slow = await replica({
        DATABASE_URL: through(proxy.port),
        SPEND_MANAGEMENT_MAX_CONCURRENCY: '1',
        DISABLE_BATCHES_IN_FLIGHT: '2',
        // Room for answers 2.5 s late: the lease (a third of it bounds today's trust) and statements.
        WORKER_LEASE_MS: '20000',
        DATABASE_STATEMENT_TIMEOUT_MS: '5000',
        REQUEST_DEADLINE_MS: '20000',
      });
      const other = await replica();
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 300);
      sim.setMode('slow', { delayMs: 600 });
      const requestsBefore = sim.requests().length;
      const disable = postStatus(slow.baseUrl, key, agentId, false);
      await vi.waitFor(() => expect(sim.requests().length).toBeGreaterThan(requestsBefore), { timeout: patience(5_000), interval: 10 });
      // From now on every answer of the slow replica's database comes 2.5 s late; the next batch's
      // claim check is sent when the first call ends (600 ms), before the enable below commits.
      proxy.delay(2_500);
      await new Promise((resolve) => setTimeout(resolve, 900));
      const enable = await postStatus(other.baseUrl, key, agentId, true);
      expect(enable.status).toBe(200);
      const answeredAt = Date.now();
      const answer = await disable;
      proxy.delay(0);
      expect([409, 500]).toContain(answer.status);
      const late = sim
        .requests()
        .filter((request) => request.campaignIds.some((id) => ids.includes(id)) && Date.parse(request.at) > answeredAt);
      expect(late.map((request) => request.at)).toEqual([]);
      sim.setMode('ok');
      await agreeInTheEnd(ids);
    } finally {
      sim.setMode('ok');
      proxy.delay(0);
      await proxy.close();
    }
  });
});

describe('a pending disable while another network keeps requests coming', () => {
  it("completes within §9's 60 s: the worker's calls age into the front of the spend-management queue", {
    timeout: patience(90_000),
  }, async () => {
    const service = await replica({ SPEND_MANAGEMENT_MAX_CONCURRENCY: '1', DISABLE_BATCHES_IN_FLIGHT: '4' });
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 300);
    // The busy network's agents, 300 campaigns each: every one of its disables has calls waiting.
    const busyAgents = await Promise.all(
      Array.from({ length: 80 }, async () => {
        const id = await db.agent(otherNetworkId);
        await db.campaigns(id, 300);
        return id;
      }),
    );
    // Spend management leaves the pending disable's campaigns out until the busy network's load runs.
    sim.refuse(ids);
    expect((await postStatus(service.baseUrl, key, agentId, false)).status).toBe(500);
    sim.setMode('slow', { delayMs: 200 });
    let stopLoad = false;
    let busyAnswers = 0;
    const load = Array.from({ length: 8 }, async (_, lane) => {
      for (let next = lane; !stopLoad && next < busyAgents.length; next += 8) {
        await postStatus(service.baseUrl, otherKey, busyAgents[next]!, false);
        busyAnswers += 1;
      }
    });
    const loadRunning = Promise.all(load).then(() => 'load ended' as const);
    try {
      await vi.waitFor(() => expect(busyAnswers).toBeGreaterThanOrEqual(8), { timeout: patience(30_000), interval: 50 });
      sim.refuse([]);
      const pendingGone = vi
        .waitFor(
          async () => {
            const { rows } = await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId]);
            expect(rows).toEqual([]);
          },
          { timeout: patience(20_000), interval: 250 },
        )
        .then(() => 'completed' as const);
      // Completed while the other network's requests were still coming, well within 60 s.
      expect(await Promise.race([pendingGone, loadRunning])).toBe('completed');
    } finally {
      stopLoad = true;
      await Promise.all(load);
      sim.refuse([]);
      sim.setMode('ok');
    }
  });
});

describe('a respond-async repeat that takes over a dead replica’s idempotency key', () => {
  it('answers 202 only once agent_approved = false is committed', { timeout: patience(60_000) }, async () => {
    const first = await replica({ REQUEST_DEADLINE_MS: '3000' });
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 50);
    const idempotencyKey = randomUUID();
    const headers = { prefer: 'respond-async', 'idempotency-key': idempotencyKey };
    // A platform transaction holds the agent row: the disable is recorded (its change id on the
    // key), the flag is not set, and the replica dies before it answers.
    const platform = await db.holdAgentRow(agentId);
    try {
      const pending = postStatus(first.baseUrl, key, agentId, false, { headers }).catch(() => undefined);
      await vi.waitFor(
        async () => {
          const { rows } = await db.pool.query('SELECT change_id FROM idempotency_keys WHERE agent_id = $1', [agentId]);
          expect(rows[0]?.change_id).toBeTruthy();
        },
        { timeout: patience(5_000), interval: 20 },
      );
      first.child.kill('SIGKILL');
      await first.exited;
      await pending;
      const second = await replica({ REQUEST_DEADLINE_MS: '3000' });
      // Once the key's lease has run out (the deadline + 5 s), a repeat takes it over.
      let answer: Response | undefined;
      let approvedAtAnswer: boolean | undefined;
      await vi.waitFor(
        async () => {
          const repeat = await postStatus(second.baseUrl, key, agentId, false, { headers });
          approvedAtAnswer = await db.agentApproved(agentId);
          expect(repeat.status).not.toBe(409);
          answer = repeat;
        },
        { timeout: patience(15_000), interval: 500 },
      );
      // While the platform still holds the row the flag cannot be set: no 202 then.
      if (answer!.status === 202) expect(approvedAtAnswer).toBe(false);
      else expect(answer!.status).toBe(500);
      await platform.commit();
    } finally {
      await platform.end();
    }
    const afterwards = await postStatus(replicas.at(-1)!.baseUrl, key, agentId, false, { headers });
    expect([200, 202]).toContain(afterwards.status);
    expect(await db.agentApproved(agentId)).toBe(false);
  });
});

// The call record (docs/interfaces.md §6, §9): a call is recorded whole (its key, its campaigns)
// before it is sent, repeated only while its answer never came and only as it was first sent; a
// call known to have paused nothing is never sent after an enable. Spend management holds its keys
// strictly (the simulator's default): a key that comes back with other campaigns is answered 422.

/** The calls spend management received for any of `ids` after `since` (ms since the epoch). */
const callsAfter = (ids: readonly string[], since: number) =>
  sim.requests().filter((request) => request.campaignIds.some((id) => ids.includes(id)) && Date.parse(request.at) > since);

/** Every key spend management received for `ids` came with one list of campaigns, and none was answered 422. */
function oneCallPerKey(ids: readonly string[]): Map<string, number> {
  const sends = new Map<string, { campaigns: string; count: number }>();
  for (const request of sim.requests().filter((r) => r.campaignIds.some((id) => ids.includes(id)))) {
    const campaigns = request.campaignIds.join();
    const seen = sends.get(request.idempotencyKey);
    expect(request.keyReused).toBeUndefined();
    if (seen) expect(campaigns).toBe(seen.campaigns);
    sends.set(request.idempotencyKey, { campaigns, count: (seen?.count ?? 0) + 1 });
  }
  return new Map([...sends].map(([key, { count }]) => [key, count]));
}

/** A replica for the call record's tests: not shed for a busy event loop, on a machine other suites load too. */
const calm = (env: Record<string, string>) => replica({ OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '10000', ...env });

/**
 * A status change as a partner sends it, again while it is shed (503 with Retry-After: nothing was
 * done; under-pressure reads an interval without a sample, as a starved process has, as overload).
 */
async function change(service: { baseUrl: string }, agentId: string, enabled: boolean): Promise<Response> {
  for (let attempt = 1; ; attempt += 1) {
    const answer = await postStatus(service.baseUrl, key, agentId, enabled);
    if (answer.status !== 503 || attempt === 10) return answer;
    await new Promise((resolve) => setTimeout(resolve, Number(answer.headers.get('retry-after') ?? 1) * 1_000));
  }
}

/**
 * Waits until the replica's worker reads no unsettled campaign (unsettled_campaigns, from its
 * latest poll): a record left in doubt would have been sent again and settled by then.
 */
async function workersSettled(service: { metricsUrl: string }, timeout = patience(20_000)): Promise<void> {
  await vi.waitFor(
    async () => {
      const metrics = await (await fetch(`${service.metricsUrl}/metrics`)).text();
      expect(metrics.split('\n').find((line) => line.startsWith('unsettled_campaigns '))).toBe('unsettled_campaigns 0');
    },
    { timeout, interval: 200 },
  );
}

/** The call record holds nothing for the agent (settled, or forgotten). */
async function recordEmpty(agentId: string): Promise<void> {
  const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM pause_calls WHERE agent_id = $1', [agentId]);
  expect(rows[0].n).toBe(0);
}

describe('a call that timed out but paused, then a retry whose call is not sent, then an enable', () => {
  it('sends the first call again as itself: the three stores agree, 100 / 100 / 100', { timeout: patience(60_000) }, async () => {
    const proxy = await startTcpProxy(databaseTarget());
    try {
      const service = await calm({
        DATABASE_URL: through(proxy.port),
        SPEND_MANAGEMENT_TIMEOUT_MS: '500',
        DATABASE_STATEMENT_TIMEOUT_MS: '2000',
        CLAIM_CHECK_MAX_AGE_MS: '250',
        // The disable is not run again by the worker before the enable: only the record settles it.
        WORKER_BACKOFF_BASE_MS: '30000',
        WORKER_BACKOFF_MAX_MS: '30000',
        WORKER_LEASE_MS: '4000',
      });
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 100);
      sim.setMode('slow', { delayMs: 1_200 });
      expect((await change(service, agentId, false)).status).toBe(500);
      const [first] = callsAfter(ids, 0);
      expect(first?.campaignIds).toHaveLength(100);
      // The time-out did not stop spend management: it paused all 100.
      await vi.waitFor(() => expect(ids.every((id) => sim.isPaused(id))).toBe(true), { timeout: patience(5_000), interval: 20 });
      sim.setMode('ok');
      // The retry's claim check answers too late to be trusted: its call is recorded, not sent.
      proxy.delay(400);
      const callsBefore = callsAfter(ids, 0).length;
      expect((await change(service, agentId, false)).status).toBe(500);
      expect(callsAfter(ids, 0).length).toBe(callsBefore);
      proxy.delay(0);
      expect((await change(service, agentId, true)).status).toBe(200);
      expect(await agreeInTheEnd(ids)).toBe(100);
      await workersSettled(service);
      await recordEmpty(agentId);
      // The first call was sent again with its key and its campaigns, and nothing else reused a key.
      const sends = oneCallPerKey(ids);
      expect(sends.get(first!.idempotencyKey)).toBeGreaterThanOrEqual(2);
    } finally {
      sim.setMode('ok');
      proxy.delay(0);
      await proxy.close();
    }
  });
});

describe('a hung call, repeated across several failed attempts, against a strict spend management', () => {
  // Its length is not its subject. While the call hangs, the breaker lets one trial call through
  // each time it half-opens, and which of the calls in doubt (the first, and one more for each run of
  // the worker) is repeated then is the luck of the draw. Waiting for the first key's third send took
  // 8-12 s in most runs and 35, 52 and 95 s in three of eight (the last past its wait, in CI on a
  // quiet machine); with the breaker half-opening after 1 s, still 13-48 s. So the test waits for
  // the first key sent again and some key sent three times, rather than for the first key's third
  // send: the property (each key's sends carry one list) is checked on every key either way.
  it('sends every key with one list of campaigns, whole: never 422, and the stores agree once it answers', {
    timeout: patience(120_000),
  }, async () => {
    const service = await calm({
      SPEND_MANAGEMENT_TIMEOUT_MS: '400',
      WORKER_LEASE_MS: '2000',
      BREAKER_RESET_TIMEOUT_MS: '1000',
      WORKER_BACKOFF_MAX_MS: '2000',
    });
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 100);
    sim.setMode('hang');
    expect((await change(service, agentId, false)).status).toBe(500);
    const firstKey = callsAfter(ids, 0)[0]!.idempotencyKey;
    // The record repeats the hung call, the worker runs the disable again under new keys: several of each.
    const sendsPerKey = () => {
      const counts = new Map<string, number>();
      for (const call of callsAfter(ids, 0)) counts.set(call.idempotencyKey, (counts.get(call.idempotencyKey) ?? 0) + 1);
      return counts;
    };
    await vi.waitFor(
      () => {
        const counts = sendsPerKey();
        expect(counts.get(firstKey)).toBeGreaterThanOrEqual(2);
        expect(Math.max(...counts.values())).toBeGreaterThanOrEqual(3);
        expect(counts.size).toBeGreaterThanOrEqual(3);
      },
      { timeout: patience(60_000), interval: 100 },
    );
    sim.setMode('ok');
    await vi.waitFor(
      async () => expect((await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId])).rows).toEqual([]),
      {
        timeout: patience(30_000),
        interval: 200,
      },
    );
    expect(await agreeInTheEnd(ids)).toBe(100);
    await workersSettled(service);
    await recordEmpty(agentId);
    const sends = oneCallPerKey(ids);
    expect(sends.get(firstKey)).toBeGreaterThanOrEqual(2);
    expect(Math.max(...sends.values())).toBeGreaterThanOrEqual(3);
    expect(sim.keysReused()).toBe(0);
  });
});

describe('a call recorded and not sent whose forget does not answer, then an enable', () => {
  it('forgets it all the same: no call reaches spend management after the enable', { timeout: patience(60_000) }, async () => {
    // The first statement that forgets a recorded call is black-holed (it never answers).
    const proxy = await startTcpProxy(databaseTarget(), { marker: 'forgotten', count: 1 });
    try {
      const leases = { WORKER_LEASE_MS: '4000' };
      // The slow replica's worker does not run the disable again before the enable.
      const slow = await calm({
        ...leases,
        DATABASE_URL: through(proxy.port),
        CLAIM_CHECK_MAX_AGE_MS: '50',
        WORKER_BACKOFF_BASE_MS: '30000',
        WORKER_BACKOFF_MAX_MS: '30000',
      });
      const other = await replica(leases);
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 100);
      // Every claim check of the slow replica answers too late: its calls are recorded, never sent.
      proxy.delay(150);
      expect((await change(slow, agentId, false)).status).toBe(500);
      await vi.waitFor(() => expect(proxy.held()).toBe(1), { timeout: patience(5_000), interval: 20 });
      const enable = await change(other, agentId, true);
      expect(enable.status).toBe(200);
      const answeredAt = Date.now();
      // No record left (a record left in doubt would be sent again, then deleted) and no pending
      // disable: nothing can send a call for these campaigns any more.
      await workersSettled(other);
      expect(callsAfter(ids, answeredAt)).toEqual([]);
      expect((await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId])).rows).toEqual([]);
      await recordEmpty(agentId);
    } finally {
      proxy.delay(0);
      await proxy.close();
    }
  });
});

describe('a call answered 503, then an enable', () => {
  it('is not in doubt: never sent again, and its record is gone', { timeout: patience(60_000) }, async () => {
    // Generous database and claim-check bounds: on a busy machine the call is still sent (CI once
    // saw the disable's 500 come from a late claim check, before any call).
    const service = await calm({ WORKER_LEASE_MS: '4000', DATABASE_STATEMENT_TIMEOUT_MS: '2000', CLAIM_CHECK_MAX_AGE_MS: '3000' });
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 100);
    sim.setMode('fail', { failStatus: 503 });
    // Asked again while no call was made: on a busy machine a disable can still answer 500 before its
    // call (a claim check answered later than its bound records the call and sends nothing).
    for (let attempt = 1; attempt === 1 || (callsAfter(ids, 0).length === 0 && attempt <= 5); attempt += 1) {
      expect((await change(service, agentId, false)).status).toBe(500);
    }
    expect(callsAfter(ids, 0).length).toBeGreaterThan(0);
    const enable = await change(service, agentId, true);
    expect(enable.status).toBe(200);
    const answeredAt = Date.now();
    sim.setMode('ok');
    await workersSettled(service);
    expect(callsAfter(ids, answeredAt)).toEqual([]);
    await recordEmpty(agentId);
    expect(await agreeInTheEnd(ids)).toBe(0);
  });
});
